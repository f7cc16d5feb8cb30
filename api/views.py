"""API views: thin. Writes call the order services; tracking reads call the selectors.

Authorisation is decided against the system of record (who owns, carries or
cooks an order) before any tracking data is read, and an order the caller may
not see answers 404, exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate, logout
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import generics, permissions, serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import roles
from api.permissions import IsCourier, IsCustomer, IsOperator, IsOperatorOrRestaurantStaff
from api.serializers import (
    AddressSerializer,
    GeoJSONPolygonSerializer,
    LocationBatchSerializer,
    LoginSerializer,
    MeSerializer,
    PlaceOrderSerializer,
    ProductSerializer,
    RestaurantSerializer,
    TransitionSerializer,
    iso,
    iso_ms,
    money,
    order_line_items,
    status_label,
    timeline,
    tracking_summary,
)
from tracker.core.events import (
    CANCELLABLE_STATUSES,
    LIFECYCLE,
    OrderStatus,
    next_status,
    now_ms,
    status_rank,
)
from tracker.deadletters import recent_dead_letters
from tracker.orders import services
from tracker.orders.models import Order
from tracker.restaurants.models import Restaurant
from tracker.security import issue_token
from tracker.tracking import selectors

GenericBody = inline_serializer("Body", fields={"detail": serializers.CharField()})

# --------------------------------------------------------------------------- auth


class TokenLoginView(APIView):
    """Exchange a username and password for an API token (mobile apps)."""

    authentication_classes: list = []
    permission_classes = [permissions.AllowAny]
    throttle_scope = "login"

    def get_authenticate_header(self, request: Request) -> str:
        return 'Token realm="api"'  # so wrong credentials are a 401, not a 403

    @extend_schema(
        request=LoginSerializer,
        responses={
            200: inline_serializer(
                "Token", {"token": serializers.CharField(), "user": MeSerializer()}
            )
        },
    )
    def post(self, request: Request) -> Response:
        body = LoginSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = authenticate(request, **body.validated_data)
        if user is None or not user.is_active:
            raise AuthenticationFailed("Wrong username or password.")
        token = issue_token(user)  # a fresh one when the last has expired
        return Response({"token": token.key, "user": _me(user)})


class LogoutView(APIView):
    """Revoke the caller's token (every device using it) and end the browser session."""

    @extend_schema(request=None, responses={204: None})
    def post(self, request: Request) -> Response:
        Token.objects.filter(user=request.user).delete()
        logout(request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _me(user) -> dict[str, Any]:
    customer, courier = roles.customer_of(user), roles.courier_of(user)
    user.roles = roles.roles_of(user)
    user.customer_id = customer.pk if customer else None
    user.courier_id = courier.pk if courier else None
    user.restaurant_ids = sorted(roles.staff_restaurant_ids(user))
    return MeSerializer(user).data


class MeView(APIView):
    @extend_schema(responses=MeSerializer)
    def get(self, request: Request) -> Response:
        return Response(_me(request.user))


class AddressListView(generics.ListCreateAPIView):
    """My delivery addresses."""

    serializer_class = AddressSerializer
    permission_classes = [IsCustomer]
    pagination_class = None

    def get_queryset(self):
        return roles.customer_of(self.request.user).addresses.all()

    @transaction.atomic
    def perform_create(self, serializer):
        customer = roles.customer_of(self.request.user)
        if serializer.validated_data.get("is_default"):
            customer.addresses.update(is_default=False)
        serializer.save(customer=customer)


class AddressDetailView(generics.RetrieveUpdateDestroyAPIView):
    serializer_class = AddressSerializer
    permission_classes = [IsCustomer]

    def get_queryset(self):
        return roles.customer_of(self.request.user).addresses.all()


# --------------------------------------------------------------------------- menu


class RestaurantListView(generics.ListAPIView):
    serializer_class = RestaurantSerializer
    queryset = Restaurant.objects.all()
    pagination_class = None


class MenuView(APIView):
    """A restaurant's menu, grouped by category."""

    @extend_schema(
        responses=inline_serializer(
            "Menu", {"restaurant": RestaurantSerializer(), "categories": serializers.ListField()}
        )
    )
    def get(self, request: Request, pk: int) -> Response:
        restaurant = get_object_or_404(Restaurant, pk=pk)
        categories: dict[str, list] = {}
        for product in restaurant.products.order_by("category", "name"):
            categories.setdefault(product.category, []).append(ProductSerializer(product).data)
        return Response(
            {
                "restaurant": RestaurantSerializer(restaurant).data,
                "categories": [
                    {"name": name, "products": items} for name, items in categories.items()
                ],
            }
        )


# --------------------------------------------------------------------------- orders


def visible_order(request: Request, pk: int) -> Order:
    """The order if the caller may see it; 404 otherwise (no existence leak)."""
    order = (
        Order.objects.select_related("restaurant", "customer__user", "courier__user")
        .prefetch_related("items__product")
        .filter(pk=pk)
        .first()
    )
    if order is None or not roles.can_see_order(request.user, order):
        raise Http404("No such order.")
    return order


def _periods(entered: list[tuple[str, int]]) -> list[selectors.StatusPeriod]:
    """(status, entered at) in order -> periods that end where the next one starts."""
    return [
        selectors.StatusPeriod(status, at, nxt[1] if nxt else None, None)
        for (status, at), nxt in zip(entered, [*entered[1:], None], strict=True)
    ]


def order_detail(order: Order, *, tracking: bool = True) -> dict[str, Any]:
    """Items, restaurant and total from the system of record; status, timeline,
    position and ETA from Pinot. Until the pipeline has seen a new order (about a
    second), its status comes from the database and ``tracking.source`` says so.

    Write responses pass ``tracking=False``: a command that succeeded must not
    answer 503 because the read side is down.
    """
    state = selectors.order_state(order.pk) if tracking else None
    now = now_ms()
    if state is not None:
        current, status_time = state.status, state.status_time
        # Entry times: the latest record's per-status columns. Only a record that lacks
        # its own current status time (written by an older job) costs a history query.
        entered = dict(state.status_times)
        if current not in entered:
            entered = {p.status: p.entered_at for p in selectors.order_status_history(order.pk)}
            entered.update(state.status_times)
        periods = _periods(sorted(entered.items(), key=lambda e: (e[1], status_rank(e[0]))))
        position = state.courier
        distance, eta = state.distance_left_km, state.eta_seconds
        tracking = {
            "source": "pinot",
            "version": state.version,
            "updated_at": iso_ms(state.updated_at),
        }
    else:
        current, status_time = order.status, int(order.status_changed_at.timestamp() * 1000)
        periods, position, distance, eta = [], None, None, None
        tracking = {"source": "database", "version": 0, "updated_at": iso(order.updated_at)}
    if not periods:  # the pipeline has not caught up: the database's own history
        periods = _periods(
            [
                (c.status, int(c.changed_at.timestamp() * 1000))
                for c in order.status_changes.order_by("changed_at", "id")
            ]
        )
    return {
        "id": order.pk,
        "status": current,
        "status_label": status_label(current),
        "status_time": iso_ms(status_time),
        "is_active": current not in (OrderStatus.DELIVERED, OrderStatus.CANCELLED),
        "can_cancel": current in CANCELLABLE_STATUSES,
        "created_at": iso(order.created_at),
        "total": money(order.total),
        "items": order_line_items(order),
        "restaurant": {
            "id": order.restaurant_id,
            "name": order.restaurant.name,
            "lat": order.restaurant.lat,
            "lon": order.restaurant.lon,
        },  # fmt: skip
        "customer": {"id": order.customer_id, "name": order.customer.display_name},
        "delivery": {
            "address": order.delivery_address,
            "lat": order.delivery_lat,
            "lon": order.delivery_lon,
        },
        "courier": (
            {"id": order.courier_id, "name": order.courier.display_name}
            if order.courier_id
            else None
        ),
        "timeline": timeline(current, periods, now),
        "position": (
            {"lat": position.lat, "lon": position.lon, "at": iso_ms(position.at)}
            if position
            else None
        ),
        "path": [
            {"lat": p.lat, "lon": p.lon, "at": iso_ms(p.at)}
            for p in (selectors.courier_path(order.pk) if state is not None and position else [])
        ],
        "distance_left_km": None if distance is None else round(distance, 3),
        "eta_seconds": eta,
        "eta": iso_ms(now + eta * 1000)
        if eta is not None and current != OrderStatus.DELIVERED
        else None,
        "tracking": tracking,
    }


ORDER_LIST_PARAMS = [
    OpenApiParameter("status", str, enum=[s.value for s in OrderStatus]),
    OpenApiParameter("state", str, enum=["active", "past"]),
    OpenApiParameter("limit", int, description="1-100, default 20"),
    OpenApiParameter("offset", int),
]


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: [f"must be an integer, got {raw!r}"]}) from None
    if not low <= value <= high:
        raise ValidationError({name: [f"must be between {low} and {high}"]})
    return value


class OrderListView(APIView):
    """GET: my orders (latest first, from Pinot). POST: place an order (customers)."""

    throttle_scope = "orders"

    def get_throttles(self):
        return super().get_throttles() if self.request.method == "POST" else []

    @extend_schema(
        operation_id="v1_orders_list",
        parameters=ORDER_LIST_PARAMS,
        responses=inline_serializer(
            "OrderPage",
            {"results": serializers.ListField(), "next": serializers.CharField(allow_null=True)},
        ),
    )
    def get(self, request: Request) -> Response:
        status_filter = request.query_params.get("status")
        if status_filter is not None and status_filter not in OrderStatus.__members__:
            raise ValidationError({"status": [f"unknown status {status_filter!r}"]})
        state = request.query_params.get("state")
        if state not in (None, "active", "past"):
            raise ValidationError({"state": ["must be 'active' or 'past'"]})
        limit = _int_param(request, "limit", 20, 1, 100)
        offset = _int_param(request, "offset", 0, 0, 100_000)
        scope = _list_scope(request)
        rows = selectors.list_orders(
            **scope, status=status_filter, state=state, limit=limit, offset=offset
        )
        next_url = None
        if len(rows) == limit:
            query = request.query_params.copy()
            query["offset"] = str(offset + limit)
            next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
        return Response(
            {
                "results": [tracking_summary(r) for r in rows],
                "limit": limit,
                "offset": offset,
                "next": next_url,
            }
        )

    @extend_schema(
        request=PlaceOrderSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Retry-safe key: the same key returns the same order",
            )
        ],
        responses={201: dict, 200: dict},
    )
    def post(self, request: Request) -> Response:
        customer = roles.customer_of(request.user)
        if customer is None:
            raise PermissionDenied("Only customers can place orders.")
        body = PlaceOrderSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        restaurant = Restaurant.objects.filter(pk=data["restaurant_id"]).first()
        if restaurant is None:
            raise ValidationError({"restaurant_id": [f"no restaurant {data['restaurant_id']}"]})
        if "address_id" in data:
            address = customer.addresses.filter(pk=data["address_id"]).first()
            if address is None:
                raise ValidationError({"address_id": ["not one of your addresses"]})
            delivery = {
                "address": f"{address.line1}, {address.city}",
                "lat": address.lat,
                "lon": address.lon,
            }
        else:
            delivery = data["delivery"]
        key = request.headers.get("Idempotency-Key") or None
        if key is not None and len(key) > 100:
            raise ValidationError({"Idempotency-Key": ["at most 100 characters"]})
        order, created = services.place_order(
            customer=customer,
            restaurant=restaurant,
            items=[services.ItemRequest(i["product_id"], i["quantity"]) for i in data["items"]],
            delivery_address=delivery["address"],
            delivery_lat=delivery["lat"],
            delivery_lon=delivery["lon"],
            idempotency_key=key,
        )
        order = visible_order(request, order.pk)
        return Response(
            order_detail(order, tracking=False),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


def _list_scope(request: Request) -> dict[str, Any]:
    """Which orders a list shows: a customer's own, a courier's, a restaurant's, or all.

    ``?as=`` picks the role when a user holds several (default: the first of
    customer, courier, restaurant_staff, operator).
    """
    user = request.user
    held = roles.roles_of(user)
    wanted = request.query_params.get("as") or (held[0] if held else None)
    if wanted not in held:
        raise PermissionDenied(
            f"You do not have the role {wanted!r}."
            if wanted
            else "You have no role that can list orders."
        )
    if wanted == "customer":
        return {"customer_id": roles.customer_of(user).pk}
    if wanted == "courier":
        return {"courier_id": roles.courier_of(user).pk}
    if wanted == "restaurant_staff":
        return {"restaurant_ids": sorted(roles.staff_restaurant_ids(user))}
    return {}


class OrderDetailView(APIView):
    @extend_schema(responses=dict)
    def get(self, request: Request, pk: int) -> Response:
        return Response(order_detail(visible_order(request, pk)))


class OrderCancelView(APIView):
    """Cancel an order (only before it is out for delivery): its customer, its
    restaurant's staff or an operator."""

    throttle_scope = "writes"

    @extend_schema(request=None, responses=dict)
    def post(self, request: Request, pk: int) -> Response:
        order = visible_order(request, pk)
        courier = roles.courier_of(request.user)
        is_customer = (
            c := roles.customer_of(request.user)
        ) is not None and c.pk == order.customer_id
        if not (
            is_customer
            or roles.is_operator(request.user)
            or order.restaurant_id in roles.staff_restaurant_ids(request.user)
        ):
            if courier is not None:
                raise PermissionDenied("Couriers cannot cancel orders.")
            raise Http404("No such order.")
        services.cancel_order(order.pk, actor=f"api:{request.user.get_username()}")
        return Response(order_detail(visible_order(request, pk), tracking=False))


#: Who may move an order into each status (besides operators).
KITCHEN_STEPS = {s.value for s in LIFECYCLE[1:5]}  # confirmed .. out for delivery
ROAD_STEPS = {OrderStatus.ARRIVING_AT_DOOR.value, OrderStatus.DELIVERED.value}


class OrderAdvanceView(APIView):
    """Move an order to its next status: restaurant staff up to OUT_FOR_DELIVERY, the
    assigned courier for ARRIVING_AT_DOOR and DELIVERED, operators any step."""

    throttle_scope = "writes"

    @extend_schema(request=TransitionSerializer, responses=dict)
    def post(self, request: Request, pk: int) -> Response:
        order = visible_order(request, pk)
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        target = body.validated_data.get("status") or next_status(order.status)
        if target is None:
            raise services.IllegalTransition(
                f"order {order.pk} is {order.status}, which is final", field="status"
            )
        user = request.user
        allowed = roles.is_operator(user)
        if not allowed and target in KITCHEN_STEPS:
            allowed = order.restaurant_id in roles.staff_restaurant_ids(user)
        if not allowed and target in ROAD_STEPS:
            courier = roles.courier_of(user)
            allowed = courier is not None and courier.pk == order.courier_id
        if not allowed:
            raise PermissionDenied(f"You may not move this order to {target}.")
        if target == OrderStatus.CANCELLED:
            raise ValidationError({"status": ["use the cancel endpoint"]})
        services.transition_order(order.pk, target, actor=f"api:{user.get_username()}")
        return Response(order_detail(visible_order(request, pk), tracking=False))


class CourierLocationView(APIView):
    """The assigned courier reports its position: one point, or a batch buffered offline."""

    permission_classes = [IsCourier]
    throttle_scope = "locations"

    @extend_schema(
        request=LocationBatchSerializer,
        responses={202: inline_serializer("Accepted", {"accepted": serializers.IntegerField()})},
    )
    def post(self, request: Request, pk: int) -> Response:
        order = visible_order(request, pk)
        courier = roles.courier_of(request.user)
        if order.courier_id != courier.pk:
            raise Http404("No such order.")
        body = LocationBatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        points = sorted(
            body.validated_data["points"], key=lambda p: p.get("recorded_at") or timezone.now()
        )
        accepted = services.record_locations(
            [
                services.CourierPosition(order, courier, p["lat"], p["lon"], p.get("recorded_at"))
                for p in points
            ]
        )
        return Response({"accepted": accepted}, status=status.HTTP_202_ACCEPTED)


# --------------------------------------------------------------------------- operations


def _restaurant_scope(request: Request) -> int | None:
    """Operators see every restaurant (or ?restaurant=); staff only their own."""
    raw = request.query_params.get("restaurant")
    restaurant_id = _int_param(request, "restaurant", 0, 1, 10**9) if raw is not None else None
    if roles.is_operator(request.user):
        return restaurant_id
    mine = roles.staff_restaurant_ids(request.user)
    if restaurant_id is None:
        if len(mine) != 1:
            raise ValidationError({"restaurant": ["choose one of your restaurants"]})
        return next(iter(mine))
    if restaurant_id not in mine:
        raise PermissionDenied("Not your restaurant.")
    return restaurant_id


class TimeInStatusView(APIView):
    """Seconds the not-yet-delivered orders have spent in their current status."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    @extend_schema(parameters=[OpenApiParameter("restaurant", int)], responses=dict)
    def get(self, request: Request) -> Response:
        rows = selectors.time_in_status_percentiles(restaurant_id=_restaurant_scope(request))
        return Response(
            {
                "results": [
                    {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(r).items()}
                    for r in rows
                ]
            }
        )


class StuckOrdersView(APIView):
    permission_classes = [IsOperatorOrRestaurantStaff]

    @extend_schema(
        parameters=[
            OpenApiParameter("older_than", int, description="seconds in status, default 600"),
            OpenApiParameter("status", str, enum=[s.value for s in OrderStatus]),
            OpenApiParameter("restaurant", int),
            OpenApiParameter("limit", int),
        ],
        responses=dict,
    )
    def get(self, request: Request) -> Response:
        older_than = _int_param(request, "older_than", 600, 0, 30 * 24 * 3600)
        status_filter = request.query_params.get("status")
        if status_filter is not None and status_filter not in OrderStatus.__members__:
            raise ValidationError({"status": [f"unknown status {status_filter!r}"]})
        rows = selectors.stuck_orders(
            older_than * 1000,
            status=status_filter,
            restaurant_id=_restaurant_scope(request),
            limit=_int_param(request, "limit", 50, 1, 1000),
        )
        return Response(
            {
                "results": [
                    {
                        **vars(r),
                        "status_time": iso_ms(r.status_time),
                        "total": money(r.total),
                        "seconds_in_status": round(r.seconds_in_status, 1),
                    }  # fmt: skip
                    for r in rows
                ]
            }
        )


class DeliveriesInAreaView(APIView):
    """Deliveries in transit whose courier is inside a GeoJSON polygon."""

    permission_classes = [IsOperator]

    @extend_schema(request=GeoJSONPolygonSerializer, responses=dict)
    def post(self, request: Request) -> Response:
        body = GeoJSONPolygonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        rows = selectors.deliveries_in_area(body.validated_data["points"])
        return Response(
            {
                "results": [
                    {
                        "order_id": r.order_id,
                        "courier_id": r.courier_id,
                        "status": r.status,
                        "lat": r.lat,
                        "lon": r.lon,
                        "at": iso_ms(r.at),
                        "distance_left_km": r.distance_left_km,
                        "eta_seconds": r.eta_seconds,
                    }  # fmt: skip
                    for r in rows
                ]
            }
        )


def _change(current: float, previous: float) -> float | None:
    if previous == 0:
        return None
    return round((current - previous) / previous * 100, 1)


class RestaurantDashboardView(APIView):
    """Per restaurant, for the last 1 h, 24 h and 7 days: orders, sales and top-3 dishes,
    with the change against the period before (percent; null when there was none)."""

    permission_classes = [IsOperatorOrRestaurantStaff]

    @extend_schema(parameters=[OpenApiParameter("restaurant", int)], responses=dict)
    def get(self, request: Request) -> Response:
        boards = selectors.restaurant_dashboard(_restaurant_scope(request))
        results = []
        for board in boards:
            windows = {}
            for name, w in board.windows.items():
                windows[name] = {
                    "orders": w.orders,
                    "previous_orders": w.previous_orders,
                    "orders_change_pct": _change(w.orders, w.previous_orders),
                    "sales": money(w.sales),
                    "previous_sales": money(w.previous_sales),
                    "sales_change_pct": _change(w.sales, w.previous_sales),
                    "top_dishes": [vars(d) for d in w.top_dishes],
                }
            results.append(
                {
                    "restaurant_id": board.restaurant_id,
                    "restaurant_name": board.restaurant_name,
                    "windows": windows,
                }
            )
        return Response({"results": results})


class DeadLettersView(APIView):
    """What the stream job refused (malformed, unknown status, impossible coordinates, ...)."""

    permission_classes = [IsOperator]

    @extend_schema(parameters=[OpenApiParameter("limit", int)], responses=dict)
    def get(self, request: Request) -> Response:
        letters = recent_dead_letters(_int_param(request, "limit", 100, 1, 1000))
        return Response(
            {
                "results": [
                    {
                        "source_topic": d.source_topic,
                        "source_partition": d.source_partition,
                        "source_offset": d.source_offset,
                        "reason": d.reason,
                        "received_at": iso_ms(d.event_time),
                        "key": d.key().decode(errors="replace") if d.key_b64 else None,
                        "original": d.original_value().decode(errors="replace"),
                    }
                    for d in letters
                ]
            }
        )
