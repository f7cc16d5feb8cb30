"""Placing, listing, following and moving orders.

Each view parses the request, calls one service or read, and answers through its
serializer. Who may see or move an order is decided there, by
:mod:`tracker.orders.policy`: an order the caller may not see answers 404
(``policy.NotVisible``), exactly like one that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from api.conditional import (
    ETAG,
    IF_NONE_MATCH,
    NOT_MODIFIED,
    answer,
    conditional_response,
    not_modified,
    quoted,
    tagged,
)
from api.pagination import PinotPagination
from api.permissions import IsCourier
from api.renderers import Rendered
from api.schema import errors
from api.serializers.orders import (
    AcceptedSerializer,
    LocationBatchSerializer,
    OrderListQuerySerializer,
    PlaceOrderSerializer,
    TransitionSerializer,
)
from api.throttles import LocationPointsThrottle, ScopedRateThrottle
from tracker.cache import bodies
from tracker.orders import policy, services
from tracker.orders.models import Order
from tracker.tracking import read_model, selectors
from tracker.tracking.serializers import OrderDetailSerializer, OrderSummarySerializer, to_json

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "maxLength": 100},
    OpenApiParameter.HEADER,
    description="Retry-safe key (at most 100 characters): sending the same key again "
    "returns the order the first request placed, with 200 instead of 201.",
)
PLACE_EXAMPLE = OpenApiExample(
    "Two dishes to a saved address",
    {"restaurant_id": 1, "items": [{"product_id": 3, "quantity": 2}, {"product_id": 5,
     "quantity": 1}], "address_id": 7},
    request_only=True,
)  # fmt: skip
PLACE_EXAMPLE_DELIVERY = OpenApiExample(
    "One dish to an explicit address",
    {"restaurant_id": 1, "items": [{"product_id": 3, "quantity": 1}],
     "delivery": {"address": "12 MG Road, Bengaluru", "lat": 12.9756, "lon": 77.6066}},
    request_only=True,
)  # fmt: skip


class OrderView(generics.GenericAPIView):
    """An order the caller can see, answered with its detail."""

    serializer_class = OrderDetailSerializer

    def written(self, order: Order, code: int = status.HTTP_200_OK) -> Response:
        """The answer to a command: the detail of the order it has just written and
        authorised, not a second read (:func:`read_model.detail_as_written`)."""
        return Response(to_json(read_model.detail_as_written(order)), status=code)


class OrderListView(OrderView):
    """GET: my orders (latest first, from Pinot). POST: place an order (customers)."""

    throttle_scope = "orders"  # placing; reading spends the reads budget
    pagination_class = PinotPagination

    @extend_schema(
        operation_id="listOrders",
        summary="List my orders",
        description="The orders the caller may see, newest first: a customer's own, a "
        "courier's (carried now, or delivered less than `COURIER_ORDER_GRACE_HOURS`, 2 h, ago), "
        "a restaurant's for its staff, every order for operators. "
        "Pages with `limit`/`offset`; `next` is set while a page comes back full. Poll it "
        "with `If-None-Match`: 304 while nothing shown has changed.",
        parameters=[OrderListQuerySerializer, IF_NONE_MATCH, ETAG],
        responses={200: OrderSummarySerializer(many=True), 304: NOT_MODIFIED},
    )
    def get(self, request: Request) -> Response:
        query = OrderListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = query.validated_data
        scope = policy.list_scope(request.user, filters.get("as"))
        validator = read_model.list_validator(
            scope, list(request.query_params.lists()), viewer=request.user
        )
        etag = None if validator is None else quoted(validator.etag)
        if etag is not None and (unchanged := not_modified(request, etag)) is not None:
            return unchanged
        rows = self.paginator.paginate_query(
            lambda **page: selectors.list_orders(
                **scope, status=filters.get("status"), state=filters.get("state"), **page
            ),
            request,
        )
        page = self.get_paginated_response([to_json(read_model.order_summary(r)) for r in rows])
        if etag is not None and read_model.list_is_current(validator, rows):
            return tagged(page, etag)
        return conditional_response(request, page.data)  # tagged by its hash

    @extend_schema(
        operation_id="placeOrder",
        summary="Place an order",
        description="Customers only. Deliver to one of my saved addresses (`address_id`) "
        "or to an explicit `delivery`. Send an `Idempotency-Key` so a retry after a lost "
        "answer cannot place the order twice.",
        request=PlaceOrderSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: OpenApiResponse(OrderDetailSerializer, "The order was placed."),
            200: OpenApiResponse(
                OrderDetailSerializer, "This `Idempotency-Key` already placed this order."
            ),
        },
        examples=[PLACE_EXAMPLE, PLACE_EXAMPLE_DELIVERY],
    )
    def post(self, request: Request) -> Response:
        customer = policy.customer_of(request.user)
        if customer is None:
            raise PermissionDenied("Only customers can place orders.")
        body = PlaceOrderSerializer(data=request.data, context={"customer": customer})
        body.is_valid(raise_exception=True)
        data = body.validated_data
        delivery = data["delivery"]
        key = request.headers.get("Idempotency-Key") or None
        if key is not None and len(key) > 100:
            raise ValidationError({"Idempotency-Key": ["at most 100 characters"]})
        order, created = services.place_order(
            customer=customer,
            restaurant=data["restaurant"],
            items=[services.ItemRequest(i["product_id"], i["quantity"]) for i in data["items"]],
            delivery_address=delivery["address"],
            delivery_lat=delivery["lat"],
            delivery_lon=delivery["lon"],
            idempotency_key=key,
        )
        return self.written(order, status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class OrderDetailView(OrderView):
    @extend_schema(
        operation_id="getOrder",
        summary="Get an order",
        description="Items, total, status, the seven-step timeline, the courier's last "
        "position, distance left and the arrival prediction (`eta`). Poll it with "
        "`If-None-Match`: 304 while nothing shown has changed.",
        parameters=[IF_NONE_MATCH, ETAG],
        responses={200: OrderDetailSerializer, 304: NOT_MODIFIED},
    )
    def get(self, request: Request, pk: int) -> Response:
        source = read_model.detail_source(pk, viewer=request.user)  # 404 before any 304
        return answer(request, quoted(source.etag), lambda: detail_body(source))


def detail_body(source: read_model.DetailSource) -> Rendered:
    """The detail's body (with its JSON), built once per content (:mod:`tracker.cache.bodies`)."""
    body = bodies.get(source.content)
    if body is None:
        body = Rendered(to_json(read_model.detail_from(source)))
        bodies.put(source.content, body)
    return body


class OrderCommandView(OrderView):
    """A command on one order: a write, answered with the order's detail from the database."""

    throttle_scope = "writes"


def command_schema(*, request: Any = None, **kwargs: Any) -> Callable:
    """The schema of an :class:`OrderCommandView`'s ``post``: no body unless ``request``
    says, and 409 when the order's status does not allow the command."""
    return extend_schema(
        request=request, responses={200: OrderDetailSerializer, **errors(409)}, **kwargs
    )


class OrderCancelView(OrderCommandView):
    """Cancel an order (only before it is out for delivery): its customer, its
    restaurant's staff or an operator."""

    @command_schema(
        operation_id="cancelOrder",
        summary="Cancel an order",
        description="Its customer, its restaurant's staff or an operator; only before it is "
        "out for delivery (409 after).",
    )
    def post(self, request: Request, pk: int) -> Response:
        return self.written(services.cancel_order(pk, by=request.user, via="api"))


class OrderAdvanceView(OrderCommandView):
    """Move an order to its next status: restaurant staff up to OUT_FOR_DELIVERY, the
    assigned courier for ARRIVING_AT_DOOR and DELIVERED, operators any step."""

    @command_schema(
        operation_id="advanceOrder",
        summary="Move an order to its next status",
        description="Restaurant staff up to `OUT_FOR_DELIVERY`, the assigned courier for "
        "`ARRIVING_AT_DOOR` and `DELIVERED`, operators any step. Without a body the order "
        "moves one step along its lifecycle.",
        request=TransitionSerializer,
        examples=[
            OpenApiExample("Next step", {}, request_only=True),
            OpenApiExample("A named step", {"status": "OUT_FOR_DELIVERY"}, request_only=True),
        ],
    )
    def post(self, request: Request, pk: int) -> Response:
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        order = services.advance_order(
            pk, by=request.user, to=body.validated_data.get("status"), via="api"
        )
        return self.written(order)


class CourierLocationView(OrderView):
    """The assigned courier reports its position: one point, or a batch buffered offline."""

    permission_classes = [IsCourier]
    throttle_scope = "locations"  # requests; and the points they carry:
    throttle_classes = [ScopedRateThrottle, LocationPointsThrottle]
    serializer_class = LocationBatchSerializer

    def get_queryset(self) -> QuerySet[Order]:
        return policy.carried_orders(self.request.user).select_related("courier")

    @extend_schema(
        operation_id="reportCourierLocations",
        summary="Report the courier's position",
        description="The order's assigned courier only: one GPS point, or a batch of up to "
        "500 buffered while offline. Points are idempotent, so a retried batch is harmless. "
        "Budget per courier and order: 1,200 points at once (20 minutes offline at a point "
        "a second), refilled at 2 points a second; beyond it 429 with `Retry-After`.",
        request=LocationBatchSerializer,
        responses={202: AcceptedSerializer},
        examples=[
            OpenApiExample("One point", {"lat": 12.9716, "lon": 77.5946}, request_only=True),
            OpenApiExample(
                "An offline batch",
                {
                    "points": [
                        {"lat": 12.9716, "lon": 77.5946, "recorded_at": "2026-11-24T12:00:00Z"},
                        {"lat": 12.9721, "lon": 77.5950, "recorded_at": "2026-11-24T12:00:05Z"},
                    ]
                },
                request_only=True,
            ),  # fmt: skip
        ],
    )
    def post(self, request: Request, pk: int) -> Response:
        order = self.get_object()
        body = LocationBatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        points = sorted(
            body.validated_data["points"], key=lambda p: p.get("recorded_at") or timezone.now()
        )
        accepted = services.record_locations(
            [
                services.LocationPoint(
                    order, order.courier, p["lat"], p["lon"], p.get("recorded_at")
                )
                for p in points
            ]
        )
        return Response(
            AcceptedSerializer({"accepted": accepted}).data, status=status.HTTP_202_ACCEPTED
        )
