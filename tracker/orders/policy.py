"""Who a user is to an order, and what that lets them see and do.

One user may hold several roles (a staff member who also orders food); each
entry point asks for the role it serves. Operators are Django staff users.
Every delivery channel (REST, WebSocket, the pages, the admin) asks these
functions, one per question (which orders, which restaurants, which
transitions), so a new channel cannot grow its own idea of who may see an order;
``tests/unit/orders/test_access_policy.py`` fails when a channel decides access itself.

Besides users and the system, one more kind of actor: a :class:`LinkHolder`, whoever
opened a shared tracking link (:mod:`tracker.sharing`). To every question it is
anonymous, except that it may see the one order its link is for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.db.models import Q, QuerySet
from django.utils import timezone

from contract.events import LIFECYCLE, TERMINAL_STATUSES, OrderStatus
from tracker.cache import outage
from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.orders.models import Order
from tracker.restaurants.models import Restaurant

User = AbstractBaseUser | AnonymousUser


class NotVisible(Order.DoesNotExist):
    """The order does not exist, or the user may not see it: the same answer (404)."""

    def __init__(self, order_id: int) -> None:
        super().__init__("No Order matches the given query.")
        self.order_id = order_id


class ScopeRequired(ValueError):
    """A user with several restaurants must say which one (``field`` names the input)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class _System:
    """The system itself (the simulator's clock, a management command): no user, every
    transition the lifecycle allows. Passed explicitly, never a default."""

    def __repr__(self) -> str:
        return "SYSTEM"


SYSTEM = _System()


@dataclass(frozen=True)
class LinkHolder:
    """Whoever opened a shared tracking link: not signed in, anonymous to every question
    but :func:`can_see` (and :func:`visible_orders`) for the link's one order. Made only by
    :func:`tracker.sharing.selectors.holder_for`, once the link was found working.

    What a holder is shown of that order is narrower than what its customer sees: the
    share socket's allow-list (:mod:`tracker.live.messages`)."""

    order_id: int
    link_id: int
    #: When the link stops working, as its order stood when it was found.
    ends_at: datetime
    #: Who made the link: its sockets count against that user's open sockets.
    creator_id: int

    is_authenticated: ClassVar[bool] = False
    is_staff: ClassVar[bool] = False
    pk: ClassVar[None] = None


Actor = User | _System | LinkHolder

#: Roles in the order a list picks by default when a user holds several.
ROLES = ("customer", "courier", "restaurant_staff", "operator")

#: Statuses restaurant staff may move an order into: confirmed .. out for delivery.
KITCHEN_STEPS = frozenset(LIFECYCLE[1 : LIFECYCLE.index(OrderStatus.OUT_FOR_DELIVERY) + 1])
#: Statuses the assigned courier may move an order into.
ROAD_STEPS = frozenset({OrderStatus.ARRIVING_AT_DOOR, OrderStatus.DELIVERED})


def _profile(user: User, name: str) -> Any:
    """The user's ``customer`` or ``courier`` profile (None when they have none)."""
    if not user.is_authenticated:
        return None
    try:
        return getattr(user, name)
    except ObjectDoesNotExist:
        return None


def customer_of(user: User) -> Customer | None:
    return _profile(user, "customer")


def courier_of(user: User) -> Courier | None:
    return _profile(user, "courier")


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


def _as_courier(user: User) -> Q:
    """The orders ``user`` sees as their courier: those they carry now, and those they
    ended less than ``COURIER_ORDER_GRACE`` ago (a courier needs the address on the way,
    not every past customer's name, address and items)."""
    ended_after = timezone.now() - settings.COURIER_ORDER_GRACE
    return Q(courier__user=user) & (
        ~Q(status__in=[s.value for s in TERMINAL_STATUSES]) | Q(status_changed_at__gte=ended_after)
    )


def visible_orders(user: Actor) -> QuerySet[Order]:
    """The orders ``user`` may see: a customer their own, a courier those it carries now
    or ended within the grace (:func:`couriered_orders`), staff their restaurants',
    operators all. Anything else must look absent (404), exactly like an order that does
    not exist. A link holder: its one order."""
    if isinstance(user, LinkHolder):
        return Order.objects.filter(pk=user.order_id)
    if user is SYSTEM or is_operator(user):
        return Order.objects.all()
    if not user.is_authenticated:
        return Order.objects.none()
    return Order.objects.filter(
        Q(customer__user=user) | _as_courier(user) | Q(restaurant_id__in=user.restaurants.all())
    )


def couriered_orders(user: User) -> QuerySet[Order]:
    """The orders ``user`` may see as their courier: carried now, or delivered less than
    ``COURIER_ORDER_GRACE`` ago (none for anyone else)."""
    if not user.is_authenticated:
        return Order.objects.none()
    return Order.objects.filter(_as_courier(user))


def carried_orders(user: User) -> QuerySet[Order]:
    """The orders ``user`` carries as their courier (none for anyone else): the only ones
    whose position they may report."""
    courier = courier_of(user)
    return Order.objects.none() if courier is None else Order.objects.filter(courier=courier)


def carried_now(user: User) -> QuerySet[Order]:
    """The deliveries ``user`` carries now as their courier: assigned to them and neither
    delivered nor cancelled (the courier's page and socket follow these)."""
    return carried_orders(user).exclude(status__in=[s.value for s in TERMINAL_STATUSES])


def can_see(user: Actor, order_id: int, customer_user_id: int | None = None) -> bool:
    """Whether ``user`` may see the order: :func:`visible_orders` for one order, with no
    query when the caller is its customer (``customer_user_id``, when the caller knows
    it: an order's customer is fixed when it is placed) or an operator; couriers and
    staff are looked up, since an order's courier and a restaurant's staff change. A link
    holder sees its link's order (the link was checked when the holder was made)."""
    if isinstance(user, LinkHolder):
        return user.order_id == order_id
    if user is SYSTEM:
        return True
    if not user.is_authenticated:
        return False
    if user.pk == customer_user_id or is_operator(user):
        return True
    return outage.answer(  # kept: the answer through a database outage (tracker.cache.outage)
        user.pk,
        ("can_see", order_id),
        lambda: visible_orders(user).filter(pk=order_id).exists(),
        about=lambda _: (order_id,),
    )


def visible_restaurants(user: User) -> QuerySet[Restaurant]:
    """The restaurants whose orders, boards and figures ``user`` may follow: operators
    every one, staff their own, anyone else none (a restaurant outside looks absent)."""
    if is_operator(user):
        return Restaurant.objects.all()
    if not user.is_authenticated:
        return Restaurant.objects.none()
    return Restaurant.objects.filter(staff=user)


def can_see_restaurant(user: User, restaurant_id: int) -> bool:
    """:func:`visible_restaurants` for one restaurant (which must exist)."""
    return visible_restaurants(user).filter(pk=restaurant_id).exists()


def restaurant_scope(user: User, restaurant_id: int | None) -> int | None:
    """Which restaurant a request is about, for every channel that serves one (the
    analytics API, the restaurant pages): operators the one asked for (None: every
    restaurant), staff the one asked for if it is theirs, or their only one.

    PermissionDenied for a restaurant that is not theirs; ScopeRequired when they run
    several and named none (the API answers 400, a page asks them to choose)."""
    if is_operator(user):
        return restaurant_id
    mine = staff_restaurant_ids(user)
    if restaurant_id is None:
        if len(mine) != 1:
            raise ScopeRequired("Choose one of your restaurants.", field="restaurant")
        return next(iter(mine))
    if restaurant_id not in mine:
        raise PermissionDenied("Not your restaurant.")
    return restaurant_id


def can_cancel(user: Actor, order: Order) -> bool:
    """Its customer, its restaurant's staff or an operator; never its courier."""
    if user is SYSTEM:
        return True
    customer = customer_of(user)
    return (
        is_operator(user)
        or (customer is not None and customer.pk == order.customer_id)
        or order.restaurant_id in staff_restaurant_ids(user)
    )


def can_share(user: Actor, order: Order) -> bool:
    """Who may give out tracking links to the order: its customer only (a link shows where
    the courier is heading, which is theirs to share)."""
    customer = None if user is SYSTEM else customer_of(user)
    return customer is not None and customer.pk == order.customer_id


def can_revoke_shares(user: Actor, order: Order) -> bool:
    """Its customer, or an operator (a customer who reports a link passed on too far)."""
    return user is SYSTEM or can_share(user, order) or is_operator(user)


def can_move_to(user: Actor, order: Order, target: OrderStatus | str) -> bool:
    """Restaurant staff move an order up to OUT_FOR_DELIVERY, the assigned courier
    to ARRIVING_AT_DOOR and DELIVERED, operators any step."""
    if user is SYSTEM or is_operator(user):
        return True
    if target in KITCHEN_STEPS and order.restaurant_id in staff_restaurant_ids(user):
        return True
    courier = courier_of(user)
    return target in ROAD_STEPS and courier is not None and courier.pk == order.courier_id


def list_scope(user: User, role: str | None = None) -> dict[str, Any]:
    """Which orders a list shows: a customer's own, a courier's (:func:`couriered_orders`),
    a restaurant's, or all.

    ``role`` picks one when a user holds several (default: the first of :data:`ROLES`).
    The result is the keyword scope of :func:`tracker.tracking.selectors.list_orders`,
    kept for a database outage (:mod:`tracker.cache.outage`).
    """
    return outage.answer(
        user.pk,
        ("list_scope", role),
        lambda: _list_scope(user, role),
        about=lambda scope: scope.get("order_ids", ()),
    )


def _list_scope(user: User, role: str | None) -> dict[str, Any]:
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
        return {"order_ids": sorted(couriered_orders(user).values_list("pk", flat=True))}
    if wanted == "restaurant_staff":
        return {"restaurant_ids": sorted(staff_restaurant_ids(user))}
    return {}
