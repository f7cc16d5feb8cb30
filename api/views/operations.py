"""Operations: analytics over Pinot for operators, and for restaurant staff on their own."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.permissions import IsOperator, IsOperatorOrRestaurantStaff
from api.schema import errors
from api.serializers.operations import (
    DeadLetterResults,
    DeadLettersQuerySerializer,
    DeliveryInAreaResults,
    GeoJSONPolygonSerializer,
    PipelineSerializer,
    RestaurantDashboardResults,
    RestaurantQuerySerializer,
    SalesSeriesQuerySerializer,
    SalesSeriesResults,
    StatusPercentilesResults,
    StuckOrderResults,
    StuckOrdersQuerySerializer,
)
from tracker.operations.deadletters import recent_dead_letters
from tracker.operations.pipeline import monitor
from tracker.orders import policy
from tracker.tracking import selectors


def query_params(serializer_class: type, request: Request) -> dict[str, Any]:
    query = serializer_class(data=request.query_params)
    query.is_valid(raise_exception=True)
    return query.validated_data


class TimeInStatusView(APIView):
    """Seconds the not-yet-delivered orders have spent in their current status."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    @extend_schema(
        operation_id="getTimeInStatus",
        summary="Time in status",
        parameters=[RestaurantQuerySerializer],
        responses={200: StatusPercentilesResults, **errors(503)},
    )
    def get(self, request: Request) -> Response:
        query = query_params(RestaurantQuerySerializer, request)
        rows = selectors.time_in_status_percentiles(
            restaurant_id=policy.restaurant_scope(request.user, query.get("restaurant"))
        )
        return Response(StatusPercentilesResults({"results": rows}).data)


class StuckOrdersView(APIView):
    """Orders longest in their status, past a threshold: where the kitchen or the road is stuck."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    @extend_schema(
        operation_id="listStuckOrders",
        summary="Stuck orders",
        parameters=[StuckOrdersQuerySerializer],
        responses={200: StuckOrderResults, **errors(503)},
    )
    def get(self, request: Request) -> Response:
        query = query_params(StuckOrdersQuerySerializer, request)
        rows = selectors.stuck_orders(
            query["older_than"] * 1000,
            status=query.get("status"),
            restaurant_id=policy.restaurant_scope(request.user, query.get("restaurant")),
            limit=query["limit"],
        )
        return Response(StuckOrderResults({"results": rows}).data)


class DeliveriesInAreaView(APIView):
    """Deliveries in transit whose courier is inside a GeoJSON polygon."""

    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="findDeliveriesInArea",
        summary="Deliveries in an area",
        request=GeoJSONPolygonSerializer,
        responses={200: DeliveryInAreaResults, **errors(503)},
    )
    def post(self, request: Request) -> Response:
        body = GeoJSONPolygonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        rows = selectors.deliveries_in_area(body.validated_data["points"])
        return Response(DeliveryInAreaResults({"results": rows}).data)


class RestaurantDashboardView(APIView):
    """Per restaurant, for the last 1 h, 24 h and 7 days: orders, sales and top-3 dishes,
    with the change against the period before (percent; null when there was none)."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    @extend_schema(
        operation_id="getRestaurantDashboard",
        summary="Restaurant dashboard",
        parameters=[RestaurantQuerySerializer],
        responses={200: RestaurantDashboardResults, **errors(503)},
    )
    def get(self, request: Request) -> Response:
        query = query_params(RestaurantQuerySerializer, request)
        boards = selectors.restaurant_dashboard(
            policy.restaurant_scope(request.user, query.get("restaurant"))
        )
        return Response(RestaurantDashboardResults({"results": boards}).data)


class SalesSeriesView(APIView):
    """Orders and sales over 1 h (5-min buckets), 24 h (hourly) or 7 d (6-hourly), each
    bucket with the same bucket of the period before; cancelled orders excluded.
    Operators: one restaurant or all; staff: their own."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    @extend_schema(
        operation_id="getSalesSeries",
        summary="Sales over time",
        parameters=[SalesSeriesQuerySerializer],
        responses={200: SalesSeriesResults, **errors(503)},
    )
    def get(self, request: Request) -> Response:
        query = query_params(SalesSeriesQuerySerializer, request)
        rows = selectors.restaurant_sales_series(
            policy.restaurant_scope(request.user, query.get("restaurant")), query["window"]
        )
        return Response(SalesSeriesResults({"results": rows}).data)


class DeadLettersView(APIView):
    """What the stream job refused (malformed, unknown status, impossible coordinates, ...)."""

    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="listDeadLetters",
        summary="Dead letters",
        parameters=[DeadLettersQuerySerializer],
        responses={200: DeadLetterResults, **errors(503)},
    )
    def get(self, request: Request) -> Response:
        query = query_params(DeadLettersQuerySerializer, request)
        letters = recent_dead_letters(query["limit"])
        return Response(DeadLetterResults({"results": letters}).data)


class PipelineView(APIView):
    """Each stage of the pipeline: ok, behind or stalled, its lag and rate."""

    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="getPipelineHealth",
        summary="Pipeline health",
        description=(
            "Each stage of the tracking pipeline (outbox relay, stream job, Pinot ingestion, "
            "push bridge) as ok, behind or stalled, with how many records it is behind and "
            "its input rate. A stage is stalled when its input grew while it did not move "
            "for longer than the configured stall time."
        ),
        responses={200: PipelineSerializer},
    )
    def get(self, request: Request) -> Response:
        return Response(PipelineSerializer(monitor().snapshot()).data)
