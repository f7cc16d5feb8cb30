"""Couriers deliver orders; each is a Django user so the mobile app can sign in."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Courier(models.Model):
    class Vehicle(models.TextChoices):
        BICYCLE = "bicycle"
        SCOOTER = "scooter"
        CAR = "car"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="courier"
    )
    phone = models.CharField(max_length=32, blank=True)
    vehicle = models.CharField(max_length=16, choices=Vehicle.choices, default=Vehicle.SCOOTER)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.display_name

    @property
    def display_name(self) -> str:
        return self.user.get_full_name() or self.user.get_username()
