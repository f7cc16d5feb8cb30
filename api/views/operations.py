"""Operations: analytics over Pinot for operators, and for restaurant staff on their own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.permissions import IsOperator, IsOperatorOrRestaurantStaff
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
from tracker.tracking import read_model, selectors


class ResultsView(APIView):
    """A GET answered as ``{"results": [...]}``: its query parsed by ``query_class``, one
    read (:meth:`results`), the answer through ``results_class`` (set, with the schema,
    by :func:`reads`)."""

    query_class: type[serializers.Serializer]
    results_class: type[serializers.Serializer]

    def get(self, request: Request) -> Response:
        query = self.query_class(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = self.results(query.validated_data)
        return Response(self.results_class({"results": rows}).data)

    def results(self, query: dict[str, Any]) -> Any:
        raise NotImplementedError

    def restaurant(self, query: dict[str, Any]) -> int | None:
        """The restaurant the read covers, as the policy decides (None: every one)."""
        return policy.restaurant_scope(self.request.user, query.get("restaurant"))


def reads(operation_id: str, summary: str, query: type, results: type) -> Callable:
    """A :class:`ResultsView`'s query and answer, and its GET in the schema."""

    def declare(view: type[ResultsView]) -> type[ResultsView]:
        view.query_class, view.results_class = query, results
        schema = extend_schema(
            operation_id=operation_id,
            summary=summary,
            parameters=[query],
            responses={200: results},
        )
        return extend_schema_view(get=schema)(view)

    return declare


@reads("getTimeInStatus", "Time in status", RestaurantQuerySerializer, StatusPercentilesResults)
class TimeInStatusView(ResultsView):
    """Seconds the not-yet-delivered orders have spent in their current status."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    def results(self, query: dict[str, Any]) -> Any:
        return selectors.time_in_status_percentiles(restaurant_id=self.restaurant(query))


@reads("listStuckOrders", "Stuck orders", StuckOrdersQuerySerializer, StuckOrderResults)
class StuckOrdersView(ResultsView):
    """Orders longest in their status, past a threshold: where the kitchen or the road is stuck."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    def results(self, query: dict[str, Any]) -> Any:
        return selectors.stuck_orders(
            query["older_than"] * 1000,
            status=query.get("status"),
            restaurant_id=self.restaurant(query),
            limit=query["limit"],
        )


class DeliveriesInAreaView(APIView):
    """Deliveries in transit whose courier is inside a GeoJSON polygon, each with the
    arrival its order's page shows."""

    permission_classes = [IsOperator]
    query_in_body = True  # a read: it spends the reads budget (api.throttles)

    @extend_schema(
        operation_id="findDeliveriesInArea",
        summary="Deliveries in an area",
        request=GeoJSONPolygonSerializer,
        responses={200: DeliveryInAreaResults},
    )
    def post(self, request: Request) -> Response:
        body = GeoJSONPolygonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        rows = read_model.deliveries_in_area(body.validated_data["points"])
        return Response(DeliveryInAreaResults({"results": rows}).data)


@reads(
    "getRestaurantDashboard",
    "Restaurant dashboard",
    RestaurantQuerySerializer,
    RestaurantDashboardResults,
)
class RestaurantDashboardView(ResultsView):
    """Per restaurant, for the last 1 h, 24 h and 7 days: orders, sales and top-3 dishes,
    with the change against the period before (percent; null when there was none)."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    def results(self, query: dict[str, Any]) -> Any:
        return selectors.restaurant_dashboard(self.restaurant(query))


@reads("getSalesSeries", "Sales over time", SalesSeriesQuerySerializer, SalesSeriesResults)
class SalesSeriesView(ResultsView):
    """Orders and sales over 1 h (5-min buckets), 24 h (hourly) or 7 d (6-hourly), each
    bucket with the same bucket of the period before; cancelled orders excluded.
    Operators: one restaurant or all; staff: their own."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    def results(self, query: dict[str, Any]) -> Any:
        return selectors.restaurant_sales_series(self.restaurant(query), query["window"])


@reads("listDeadLetters", "Dead letters", DeadLettersQuerySerializer, DeadLetterResults)
class DeadLettersView(ResultsView):
    """What the stream job refused (malformed, unknown status, impossible coordinates, ...)."""

    permission_classes = [IsOperator]

    def results(self, query: dict[str, Any]) -> Any:
        return recent_dead_letters(query["limit"])


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
