"""Customers are Django users with a profile and one or more delivery addresses."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

LATITUDE = [MinValueValidator(-90), MaxValueValidator(90)]
LONGITUDE = [MinValueValidator(-180), MaxValueValidator(180)]


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
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="customer"
    )
    created_at = models.DateTimeField(auto_now_add=True)


class Address(models.Model):
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
        return f"{self.label}: {self.line1}, {self.city}"
