"""Restaurants and their menus."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics

from api.serializers.menu import MenuSerializer, RestaurantSerializer
from tracker.restaurants.models import Restaurant


@extend_schema_view(get=extend_schema(operation_id="listRestaurants", summary="List restaurants"))
class RestaurantListView(generics.ListAPIView):
    serializer_class = RestaurantSerializer
    queryset = Restaurant.objects.all()
    pagination_class = None


@extend_schema_view(
    get=extend_schema(
        operation_id="getMenu",
        summary="Get a restaurant's menu",
        description="Products by category, with prices; order with their `id`s.",
    )
)
class MenuView(generics.RetrieveAPIView):
    """A restaurant's menu, grouped by category."""

    serializer_class = MenuSerializer
    queryset = Restaurant.objects.all()
