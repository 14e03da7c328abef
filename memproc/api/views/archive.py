"""Archiving a thread and bringing it back: `threads/<id>/archive/` and `threads/<id>/unarchive/`."""

from __future__ import annotations

from collections.abc import Callable

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memproc import models
from memproc.api.serializers.threads import ThreadSerializer
from memproc.api.views.base import THREAD_RESOURCE_PARAMETER, MemprocViewMixin, errors, id_parameter
from memproc.selectors.threads import threads_for_resources
from memproc.services.threads import thread_archive, thread_unarchive


class ThreadArchiveBaseView(MemprocViewMixin, generics.GenericAPIView):
    """POST only, with no body. The thread must be the caller's to write (staff:
    `memproc.change_thread`), else 404, as for renaming it. Idempotent: the thread is answered as it
    now is."""

    serializer_class = ThreadSerializer
    write: Callable[..., models.Thread]

    def get_queryset(self) -> QuerySet[models.Thread]:
        return threads_for_resources(resource_ids=self.allowed_resources())

    def get_object(self) -> models.Thread:
        return self.thread_object()

    def post(self, request: Request, id: str) -> Response:
        thread = self.get_object()
        # Nothing is read from the body, but one that is not a JSON object is a 400, as elsewhere.
        serializers.Serializer(data=request.data).is_valid(raise_exception=True)
        thread = type(self).write(thread=thread)
        return Response(ThreadSerializer(thread).data)


THREAD = [id_parameter("The thread id."), THREAD_RESOURCE_PARAMETER]
# Nothing is read from the body: an empty one or `{}` (any JSON object is ignored).
NO_BODY = {"application/json": {"type": "object", "description": "Nothing is needed; send `{}` or no body."}}


class ThreadArchiveView(ThreadArchiveBaseView):
    write = staticmethod(thread_archive)

    @extend_schema(
        tags=["threads"],
        summary="Archive a thread",
        description=(
            "Sets `archived_at` (kept if already archived). An archived thread leaves the default thread "
            "list and other threads' semantic recall (unless the agent includes archived threads); its "
            "messages stay, and a turn on it still runs and leaves it archived."
        ),
        parameters=THREAD,
        request=NO_BODY,
        responses={200: ThreadSerializer, **errors(400, 404)},
    )
    def post(self, request: Request, id: str) -> Response:
        return super().post(request, id)


class ThreadUnarchiveView(ThreadArchiveBaseView):
    write = staticmethod(thread_unarchive)

    @extend_schema(
        tags=["threads"],
        summary="Bring an archived thread back",
        description="Clears `archived_at` (a thread that is not archived is answered unchanged).",
        parameters=THREAD,
        request=NO_BODY,
        responses={200: ThreadSerializer, **errors(400, 404)},
    )
    def post(self, request: Request, id: str) -> Response:
        return super().post(request, id)
