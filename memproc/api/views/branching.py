"""Branching a conversation: a new thread with a thread's messages up to one of them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from memproc import models
from memproc.api.serializers.threads import ThreadBranchSerializer, ThreadSerializer
from memproc.api.views.base import THREAD_RESOURCE_PARAMETER, MemprocViewMixin, errors, id_parameter
from memproc.exceptions import ValidationError as MemprocValidationError
from memproc.selectors.messages import message_sequence
from memproc.selectors.threads import threads_for_resources
from memproc.services.threads import thread_clone


class ThreadBranchView(MemprocViewMixin, generics.GenericAPIView):
    """POST only. The thread must be the caller's to write (staff: `memproc.change_thread`), else 404;
    the branch belongs to the same resource."""

    serializer_class = ThreadBranchSerializer

    def get_queryset(self) -> QuerySet[models.Thread]:
        return threads_for_resources(resource_ids=self.allowed_resources())

    def get_object(self) -> models.Thread:
        return self.thread_object()

    @extend_schema(
        tags=["threads"],
        summary="Branch a conversation at a message",
        description=(
            "A new thread of the same resource with copies of the thread's messages up to and including "
            "`message_id` (new message ids, same order), their embeddings and the thread's working "
            "memory. A message of another thread is a 400 on `message_id`."
        ),
        parameters=[id_parameter("The thread id."), THREAD_RESOURCE_PARAMETER],
        request=ThreadBranchSerializer,
        responses={201: ThreadSerializer, **errors(400, 404)},
    )
    def post(self, request: Request, id: str) -> Response:
        thread = self.get_object()
        data = self.valid(request.data)
        if message_sequence(thread_key=thread.pk, message_id=data["message_id"]) is None:
            raise serializers.ValidationError({"message_id": ["This thread has no such message."]})
        try:
            branch = thread_clone(
                thread=thread,
                new_thread_id=data.get("id"),
                title=data.get("title"),
                up_to_message_id=data["message_id"],
            )
        except MemprocValidationError as exc:
            raise serializers.ValidationError({"id": [str(exc)]}) from exc
        return Response(ThreadSerializer(branch).data, status=status.HTTP_201_CREATED)

    def valid(self, data: Any) -> dict[str, Any]:
        serializer = ThreadBranchSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)
