"""Role permissions. Object-level visibility of orders is in :func:`api.roles.can_see_order`."""

from rest_framework.permissions import BasePermission

from api import roles


class IsCustomer(BasePermission):
    message = "Only customers can do this."

    def has_permission(self, request, view) -> bool:
        return roles.customer_of(request.user) is not None


class IsCourier(BasePermission):
    message = "Only couriers can do this."

    def has_permission(self, request, view) -> bool:
        return roles.courier_of(request.user) is not None


class IsOperator(BasePermission):
    message = "Only operators can do this."

    def has_permission(self, request, view) -> bool:
        return roles.is_operator(request.user)


class IsOperatorOrRestaurantStaff(BasePermission):
    message = "Only operators and restaurant staff can do this."

    def has_permission(self, request, view) -> bool:
        return roles.is_operator(request.user) or bool(roles.staff_restaurant_ids(request.user))
