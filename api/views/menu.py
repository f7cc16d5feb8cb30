"""Restaurants and their menus."""

from __future__ import annotations

from rest_framework import generics

from api.serializers.menu import MenuSerializer, RestaurantSerializer
from tracker.restaurants.models import Restaurant


class RestaurantListView(generics.ListAPIView):
    serializer_class = RestaurantSerializer
    queryset = Restaurant.objects.all()
    pagination_class = None


class MenuView(generics.RetrieveAPIView):
    """A restaurant's menu, grouped by category."""

    serializer_class = MenuSerializer
    queryset = Restaurant.objects.all()
