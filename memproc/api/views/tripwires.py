"""Tripwire logs for operators: list, filter, read (staff with `memproc.view_tripwirelog`), review
(staff with `memproc.change_tripwirelog`), as in the admin."""

from __future__ import annotations

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from memproc import models
from memproc.api.filters import TripwireFilter
from memproc.api.pagination import TripwireCursorPagination
from memproc.api.permissions import TripwireQueuePermission
from memproc.api.serializers.tripwires import TripwireLogSerializer, TripwireReviewSerializer
from memproc.api.views.base import MemprocViewMixin, errors, id_parameter
from memproc.services.tripwires import tripwire_review

TRIPWIRE_ID = id_parameter("The tripwire log id (a UUID).")


@extend_schema(tags=["tripwires"])
@extend_schema_view(
    list=extend_schema(
        summary="List blocked turns (staff with memproc.view_tripwirelog)",
        responses={200: TripwireLogSerializer(many=True), **errors(400, 404)},
    ),
    retrieve=extend_schema(
        summary="One blocked turn (staff with memproc.view_tripwirelog)",
        parameters=[TRIPWIRE_ID],
        responses={200: TripwireLogSerializer, **errors(404)},
    ),
)
class TripwireViewSet(
    MemprocViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    permission_classes = [TripwireQueuePermission]
    serializer_class = TripwireLogSerializer
    pagination_class = TripwireCursorPagination
    filter_backends = [DjangoFilterBackend]
    filterset_class = TripwireFilter

    def get_queryset(self) -> QuerySet[models.TripwireLog]:
        return models.TripwireLog.objects.prefetch_related("reviewed_by")

    def filter_queryset(self, queryset: QuerySet[models.TripwireLog]) -> QuerySet[models.TripwireLog]:
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    @extend_schema(
        summary="Review a blocked turn: confirm it, mark it a false positive, or reopen it (staff with "
        "memproc.change_tripwirelog)",
        parameters=[TRIPWIRE_ID],
        request=TripwireReviewSerializer,
        responses={200: TripwireLogSerializer, **errors(400, 404)},
    )
    @action(detail=True, methods=["post"])
    def review(self, request: Request, id: str) -> Response:
        log = self.get_object()
        serializer = TripwireReviewSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        log = tripwire_review(log=log, reviewer=request.user, **serializer.validated_data)
        return Response(TripwireLogSerializer(log).data)
