"""Restaurants and their menus."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tracker.restaurants.models import Product, Restaurant


class ProductSerializer(serializers.ModelSerializer):
    class Meta:
        model = Product
        fields = ["id", "name", "category", "description", "price", "image_url", "is_available"]


class RestaurantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Restaurant
        fields = ["id", "name", "address", "lat", "lon", "is_open"]


class MenuCategorySerializer(serializers.Serializer):
    name = serializers.CharField()
    products = ProductSerializer(many=True)


class MenuSerializer(serializers.Serializer):
    """A restaurant's menu, grouped by category (categories and products by name)."""

    restaurant = RestaurantSerializer(source="*")
    categories = serializers.SerializerMethodField()

    @extend_schema_field(MenuCategorySerializer(many=True))
    def get_categories(self, restaurant: Restaurant) -> list[dict]:
        categories: dict[str, list[Product]] = {}
        for product in restaurant.products.order_by("category", "name"):
            categories.setdefault(product.category, []).append(product)
        return MenuCategorySerializer(
            [{"name": name, "products": items} for name, items in categories.items()], many=True
        ).data
