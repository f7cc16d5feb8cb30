"""Restaurants, the staff who run them, and their menu products."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from tracker.customers.models import LATITUDE, LONGITUDE
from tracker.restaurants.validators import validate_image_url


class Restaurant(models.Model):
    """A kitchen customers order from; ``staff`` are the users who run its board and see
    its orders and dashboard.
    """

    name = models.CharField(max_length=120)
    address = models.CharField(max_length=200, blank=True)
    lat = models.FloatField("latitude", validators=LATITUDE)
    lon = models.FloatField("longitude", validators=LONGITUDE)
    is_open = models.BooleanField(default=True)
    staff = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="restaurants")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Product(models.Model):
    """A dish on one restaurant's menu; orders copy its price (:class:`OrderItem`), so
    editing the menu never changes an order.
    """

    restaurant = models.ForeignKey(Restaurant, on_delete=models.CASCADE, related_name="products")
    name = models.CharField(max_length=120)
    category = models.CharField(max_length=60, db_index=True)
    description = models.TextField(blank=True)
    price = models.DecimalField(
        max_digits=10, decimal_places=2, validators=[MinValueValidator(Decimal("0.00"))]
    )
    #: Not a URLField: the demo's pictures are paths on this site, which it would refuse.
    image_url = models.CharField(
        max_length=200,
        blank=True,
        validators=[validate_image_url],
        help_text="The product's picture: an https:// address, or a path on this server "
        "under its static files such as /static/menu/pizza.svg (resolve a path against "
        "the server's address). Empty when there is no picture.",
    )
    is_available = models.BooleanField(default=True)

    class Meta:
        ordering = ["restaurant_id", "category", "name"]
        constraints = [
            models.UniqueConstraint(fields=["restaurant", "name"], name="unique_product_per_menu")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.restaurant})"
