"""Role and object permissions, asked of :mod:`tracker.orders.policy`.

Which orders a caller may see at all is a queryset (``policy.visible_orders``),
so an order they may not see answers 404, exactly like one that does not exist;
what they may do with one they can see is the services' to enforce. These classes
only let a role in.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from tracker.orders import policy


class IsCustomer(BasePermission):
    message = "Only customers can do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return policy.customer_of(request.user) is not None


class IsCourier(BasePermission):
    message = "Only couriers can do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return policy.courier_of(request.user) is not None


class IsOperator(BasePermission):
    message = "Only operators can do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return policy.is_operator(request.user)


class IsOperatorOrRestaurantStaff(BasePermission):
    message = "Only operators and restaurant staff can do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return policy.is_operator(request.user) or bool(policy.staff_restaurant_ids(request.user))
