"""Who a user is to an order, and what that lets them see and do.

One user may hold several roles (a staff member who also orders food); each
entry point asks for the role it serves. Operators are Django staff users.
Every delivery channel (REST, WebSocket, the pages) asks these functions, so a
new channel cannot grow its own idea of who may see an order.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet

from contract.events import LIFECYCLE, OrderStatus
from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.orders.models import Order

User = AbstractBaseUser | AnonymousUser

#: Roles in the order a list picks by default when a user holds several.
ROLES = ("customer", "courier", "restaurant_staff", "operator")

#: Statuses restaurant staff may move an order into: confirmed .. out for delivery.
KITCHEN_STEPS = frozenset(LIFECYCLE[1 : LIFECYCLE.index(OrderStatus.OUT_FOR_DELIVERY) + 1])
#: Statuses the assigned courier may move an order into.
ROAD_STEPS = frozenset({OrderStatus.ARRIVING_AT_DOOR, OrderStatus.DELIVERED})


def customer_of(user: User) -> Customer | None:
    if not user.is_authenticated:
        return None
    try:
        return user.customer
    except Customer.DoesNotExist:
        return None


def courier_of(user: User) -> Courier | None:
    if not user.is_authenticated:
        return None
    try:
        return user.courier
    except Courier.DoesNotExist:
        return None


def is_operator(user: User) -> bool:
    return bool(user.is_authenticated and user.is_staff)


def staff_restaurant_ids(user: User) -> set[int]:
    if not user.is_authenticated:
        return set()
    return set(user.restaurants.values_list("id", flat=True))


def roles_of(user: User) -> list[str]:
    held = {
        "customer": customer_of(user) is not None,
        "courier": courier_of(user) is not None,
        "restaurant_staff": bool(staff_restaurant_ids(user)),
        "operator": is_operator(user),
    }
    return [role for role in ROLES if held[role]]


def visible_orders(user: User) -> QuerySet[Order]:
    """The orders ``user`` may see: a customer their own, a courier those assigned to
    it, staff their restaurants', operators all. Anything else must look absent
    (404), exactly like an order that does not exist."""
    if is_operator(user):
        return Order.objects.all()
    if not user.is_authenticated:
        return Order.objects.none()
    return Order.objects.filter(
        Q(customer__user=user) | Q(courier__user=user) | Q(restaurant_id__in=user.restaurants.all())
    )


def can_see(user: User, order_id: int, customer_user_id: int) -> bool:
    """Whether ``user`` may see the order: :func:`visible_orders` for one order, with no
    query when the caller is its customer (an order's customer is fixed when it is
    placed) or an operator; couriers and staff are looked up, since an order's courier
    and a restaurant's staff change."""
    if not user.is_authenticated:
        return False
    if user.pk == customer_user_id or is_operator(user):
        return True
    return visible_orders(user).filter(pk=order_id).exists()


def can_cancel(user: User, order: Order) -> bool:
    """Its customer, its restaurant's staff or an operator; never its courier."""
    customer = customer_of(user)
    return (
        is_operator(user)
        or (customer is not None and customer.pk == order.customer_id)
        or order.restaurant_id in staff_restaurant_ids(user)
    )


def can_move_to(user: User, order: Order, target: OrderStatus | str) -> bool:
    """Restaurant staff move an order up to OUT_FOR_DELIVERY, the assigned courier
    to ARRIVING_AT_DOOR and DELIVERED, operators any step."""
    if is_operator(user):
        return True
    if target in KITCHEN_STEPS and order.restaurant_id in staff_restaurant_ids(user):
        return True
    courier = courier_of(user)
    return target in ROAD_STEPS and courier is not None and courier.pk == order.courier_id


def list_scope(user: User, role: str | None = None) -> dict[str, Any]:
    """Which orders a list shows: a customer's own, a courier's, a restaurant's, or all.

    ``role`` picks one when a user holds several (default: the first of :data:`ROLES`).
    The result is the keyword scope of :func:`tracker.tracking.selectors.list_orders`.
    """
    held = roles_of(user)
    wanted = role or (held[0] if held else None)
    if wanted not in held:
        raise PermissionDenied(
            f"You do not have the role {wanted!r}."
            if wanted
            else "You have no role that can list orders."
        )
    if wanted == "customer":
        return {"customer_id": customer_of(user).pk}
    if wanted == "courier":
        return {"courier_id": courier_of(user).pk}
    if wanted == "restaurant_staff":
        return {"restaurant_ids": sorted(staff_restaurant_ids(user))}
    return {}
