"""Placing, listing, following and moving orders.

Which orders a caller may touch is :func:`tracker.orders.policy.visible_orders`:
an order they may not see answers 404, exactly like one that does not exist.
"""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from api.pagination import PinotPagination
from api.permissions import CanCancelOrder, IsCourier
from api.serializers.orders import (
    AcceptedSerializer,
    LocationBatchSerializer,
    OrderDetailSerializer,
    OrderListQuerySerializer,
    OrderSummarySerializer,
    PlaceOrderSerializer,
    TransitionSerializer,
)
from contract.events import OrderStatus, next_status
from tracker.orders import policy, services
from tracker.orders.models import Order, OrderItem
from tracker.tracking import read_model, selectors

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    description="Retry-safe key: the same key returns the same order",
)


class OrderView(generics.GenericAPIView):
    """An order the caller can see, answered with its detail."""

    serializer_class = OrderDetailSerializer

    def get_queryset(self) -> QuerySet[Order]:
        return (
            policy.visible_orders(self.request.user)
            .select_related("restaurant", "customer__user", "courier__user")
            .prefetch_related(Prefetch("items", OrderItem.objects.select_related("product")))
        )

    def detail(
        self, order_id: int, *, tracking: bool = True, code: int = status.HTTP_200_OK
    ) -> Response:
        """After a command (``tracking=False``) the status comes from the database only: a
        command that succeeded must not answer 503 because the read side is down."""
        # The read model's dict is already the typed JSON (the socket sends it as it is);
        # the serializer types it for the schema, and passing it through again only cost time.
        return Response(read_model.order_detail(order_id, tracking=tracking), status=code)


class OrderListView(OrderView):
    """GET: my orders (latest first, from Pinot). POST: place an order (customers)."""

    throttle_scope = "orders"
    pagination_class = PinotPagination

    def get_throttles(self):
        return super().get_throttles() if self.request.method == "POST" else []

    @extend_schema(
        operation_id="v1_orders_list",
        parameters=[OrderListQuerySerializer],
        responses=OrderSummarySerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        query = OrderListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = query.validated_data
        scope = policy.list_scope(request.user, filters.get("as"))
        rows = self.paginator.paginate_query(
            lambda **page: selectors.list_orders(
                **scope, status=filters.get("status"), state=filters.get("state"), **page
            ),
            request,
        )
        summaries = [read_model.order_summary(r) for r in rows]
        return self.get_paginated_response(OrderSummarySerializer(summaries, many=True).data)

    @extend_schema(
        request=PlaceOrderSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: OrderDetailSerializer, 200: OrderDetailSerializer},
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
        return self.detail(
            order.pk,
            tracking=False,
            code=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class OrderDetailView(OrderView):
    def get_object(self) -> read_model.PlacedOrder:
        """The order's placed part, kept by the read model; who may see it is checked on
        every request all the same."""
        placed = read_model.placed_order(self.kwargs["pk"])
        if placed is None or not policy.can_see(
            self.request.user, placed.id, placed.customer_user_id
        ):
            raise NotFound("No Order matches the given query.")
        self.check_object_permissions(self.request, placed)
        return placed

    def get(self, request: Request, pk: int) -> Response:
        return self.detail(self.get_object().id)


class OrderCancelView(OrderView):
    """Cancel an order (only before it is out for delivery): its customer, its
    restaurant's staff or an operator."""

    permission_classes = [IsAuthenticated, CanCancelOrder]
    throttle_scope = "writes"

    @extend_schema(request=None)
    def post(self, request: Request, pk: int) -> Response:
        order = self.get_object()
        services.cancel_order(order.pk, actor=f"api:{request.user.get_username()}")
        return self.detail(order.pk, tracking=False)


class OrderAdvanceView(OrderView):
    """Move an order to its next status: restaurant staff up to OUT_FOR_DELIVERY, the
    assigned courier for ARRIVING_AT_DOOR and DELIVERED, operators any step."""

    throttle_scope = "writes"

    @extend_schema(request=TransitionSerializer)
    def post(self, request: Request, pk: int) -> Response:
        order = self.get_object()
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        target = body.validated_data.get("status") or next_status(order.status)
        if target is None:
            raise services.IllegalTransition(
                f"order {order.pk} is {order.status}, which is final", field="status"
            )
        if not policy.can_move_to(request.user, order, target):
            raise PermissionDenied(f"You may not move this order to {target}.")
        if target == OrderStatus.CANCELLED:
            raise ValidationError({"status": ["use the cancel endpoint"]})
        services.transition_order(order.pk, target, actor=f"api:{request.user.get_username()}")
        return self.detail(order.pk, tracking=False)


class CourierLocationView(OrderView):
    """The assigned courier reports its position: one point, or a batch buffered offline."""

    permission_classes = [IsCourier]
    throttle_scope = "locations"
    serializer_class = LocationBatchSerializer

    def get_queryset(self) -> QuerySet[Order]:
        return super().get_queryset().filter(courier=policy.courier_of(self.request.user))

    @extend_schema(request=LocationBatchSerializer, responses={202: AcceptedSerializer})
    def post(self, request: Request, pk: int) -> Response:
        order = self.get_object()
        body = LocationBatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        points = sorted(
            body.validated_data["points"], key=lambda p: p.get("recorded_at") or timezone.now()
        )
        accepted = services.record_locations(
            [
                services.CourierPosition(
                    order, order.courier, p["lat"], p["lon"], p.get("recorded_at")
                )
                for p in points
            ]
        )
        return Response(
            AcceptedSerializer({"accepted": accepted}).data, status=status.HTTP_202_ACCEPTED
        )
