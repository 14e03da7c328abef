"""Tool calls that wait for a decision: the queue of those the caller may decide, and the decisions.

A call shows only to someone who may decide it (memproc.services.approvals.may_decide: the tool's
permission, `memproc.change_pendingtoolcall` for `requires_approval=True`, or the tool's callable);
to anyone else it is a 404, as if it did not exist. Approving or rejecting resumes the turn and answers
its result, as `generate/` would; a call no longer pending is a 409.
"""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from memproc import models
from memproc.api.pagination import PendingCursorPagination
from memproc.api.serializers.approvals import (
    ApproveSerializer,
    PendingToolCallSerializer,
    RejectSerializer,
    ToolResultSerializer,
)
from memproc.api.serializers.turns import GenerateResultSerializer, generate_result_data
from memproc.api.views.base import MemprocViewMixin, errors, id_parameter, outside_request_transactions
from memproc.services import approvals

PENDING_ID = id_parameter("The pending tool call's id (a UUID).")


@outside_request_transactions  # approving and submitting a result resume the turn
@extend_schema(tags=["approvals"])
@extend_schema_view(
    list=extend_schema(
        summary="Tool calls waiting for a decision that the caller may decide",
        responses={200: PendingToolCallSerializer(many=True), **errors(400)},
    ),
    retrieve=extend_schema(
        summary="One tool call the caller may decide (any state)",
        parameters=[PENDING_ID],
        responses={200: PendingToolCallSerializer, **errors(404)},
    ),
)
class PendingToolCallViewSet(
    MemprocViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    permission_classes = [IsAuthenticated]
    serializer_class = PendingToolCallSerializer
    pagination_class = PendingCursorPagination

    def get_queryset(self) -> QuerySet[models.PendingToolCall]:
        return approvals.pending_decidable(user=self.request.user).prefetch_related("decided_by")

    def get_object(self) -> models.PendingToolCall:
        """The call, resolved once, if the caller may decide it; else a 404 like a missing one."""
        return approvals.pending_visible(self.kwargs["id"], user=self.request.user)

    @extend_schema(
        summary="Approve the call (optionally with edited arguments): the turn resumes, the tool runs "
        "once, and the answer is the turn's result",
        parameters=[PENDING_ID],
        request=ApproveSerializer,
        responses={200: GenerateResultSerializer, **errors(400, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, id: str) -> Response:
        pending = self.get_object()  # a call the caller may not decide is a 404 before its body is read
        body = ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = approvals.approve(
            pending.pk, actor=request.user, arguments=body.validated_data.get("arguments")
        )
        return Response(generate_result_data(result))

    @extend_schema(
        summary="Reject the call with a reason: the tool does not run, the model reads the rejection and "
        "the turn goes on; the answer is the turn's result",
        parameters=[PENDING_ID],
        request=RejectSerializer,
        responses={200: GenerateResultSerializer, **errors(400, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, id: str) -> Response:
        pending = self.get_object()
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = approvals.reject(pending.pk, actor=request.user, reason=body.validated_data["reason"])
        return Response(generate_result_data(result))

    @extend_schema(
        summary="Answer a client-side tool call of the caller's resource with its result: the turn "
        "resumes and the answer is its result",
        parameters=[PENDING_ID],
        request=ToolResultSerializer,
        responses={200: GenerateResultSerializer, **errors(400, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def result(self, request: Request, id: str) -> Response:
        # A write to the call's resource: the owner, or staff with memproc.change_thread.
        resources = self.allowed_resources()
        pending = approvals.pending_client_call(id, resources=resources)
        body = ToolResultSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = approvals.submit_result(
            pending.pk, result=body.validated_data["result"], resources=resources
        )
        return Response(generate_result_data(result))


__all__ = ["PendingToolCallViewSet"]
