"""Customers are Django users with a profile and one or more delivery addresses."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

LATITUDE = [MinValueValidator(-90), MaxValueValidator(90)]
LONGITUDE = [MinValueValidator(-180), MaxValueValidator(180)]

#: Longest delivery address an order stores (``Order.delivery_address``): a saved address
#: is delivered to as one line, "street, city", which must fit it.
DELIVERY_ADDRESS_MAX = 300


class UserProfile(models.Model):
    """A role a Django user holds (``user.customer``, ``user.courier``), with a phone.

    Each subclass declares its own ``user`` one-to-one field, named after the role.
    """

    phone = models.CharField(max_length=32, blank=True)

    class Meta:
        abstract = True
        ordering = ["id"]

    def __str__(self) -> str:
        return self.display_name

    @property
    def display_name(self) -> str:
        return self.user.get_full_name() or self.user.get_username()


class Customer(UserProfile):
    """The customer role of a Django user: who may place orders and follow their own."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="customer"
    )
    created_at = models.DateTimeField(auto_now_add=True)


class Address(models.Model):
    """A customer's delivery address with its map position; one of them is the default."""

    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="addresses")
    label = models.CharField(max_length=40, default="Home")
    line1 = models.CharField("street address", max_length=200)
    city = models.CharField(max_length=100, default="Bengaluru")
    lat = models.FloatField("latitude", validators=LATITUDE)
    lon = models.FloatField("longitude", validators=LONGITUDE)
    is_default = models.BooleanField(default=False)

    class Meta:
        ordering = ["customer_id", "-is_default", "id"]
        verbose_name_plural = "addresses"

    def __str__(self) -> str:
        return f"{self.label}: {self.one_line}"

    @property
    def one_line(self) -> str:
        """The address as an order stores it."""
        return f"{self.line1}, {self.city}"

    def clean(self) -> None:
        """Street and city (200 + 100 characters each) may not fit an order's one line
        together; the admin and the API refuse such an address by its street field."""
        problem = one_line_problem(self.line1 or "", self.city or "")
        if problem:
            raise ValidationError({"line1": problem})


def one_line_problem(line1: str, city: str) -> str | None:
    """Why an address with this street and city cannot be delivered to, or None."""
    length = len(line1) + len(city) + 2
    if length <= DELIVERY_ADDRESS_MAX:
        return None
    return (
        f"street and city together are {length} characters as one line; "
        f"at most {DELIVERY_ADDRESS_MAX} fit an order's delivery address"
    )
