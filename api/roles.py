"""Who a user is to the API: customer, courier, restaurant staff, operator.

One user may hold several roles (a staff member who also orders food); each
endpoint asks for the role it serves. Operators are Django staff users.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from tracker.couriers.models import Courier
from tracker.customers.models import Customer
from tracker.orders.models import Order


def customer_of(user: AbstractBaseUser | AnonymousUser) -> Customer | None:
    if not user.is_authenticated:
        return None
    try:
        return user.customer
    except Customer.DoesNotExist:
        return None


def courier_of(user: AbstractBaseUser | AnonymousUser) -> Courier | None:
    if not user.is_authenticated:
        return None
    try:
        return user.courier
    except Courier.DoesNotExist:
        return None


def is_operator(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_staff)


def staff_restaurant_ids(user: AbstractBaseUser | AnonymousUser) -> set[int]:
    if not user.is_authenticated:
        return set()
    return set(user.restaurants.values_list("id", flat=True))


def roles_of(user: AbstractBaseUser | AnonymousUser) -> list[str]:
    roles = []
    if customer_of(user) is not None:
        roles.append("customer")
    if courier_of(user) is not None:
        roles.append("courier")
    if staff_restaurant_ids(user):
        roles.append("restaurant_staff")
    if is_operator(user):
        roles.append("operator")
    return roles


def can_see_order(user: AbstractBaseUser | AnonymousUser, order: Order) -> bool:
    """A customer sees their own orders, a courier those assigned to it, staff their
    restaurant's, operators everything."""
    if is_operator(user):
        return True
    customer = customer_of(user)
    if customer is not None and order.customer_id == customer.pk:
        return True
    courier = courier_of(user)
    if courier is not None and order.courier_id == courier.pk:
        return True
    return order.restaurant_id in staff_restaurant_ids(user)
