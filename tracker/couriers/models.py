"""Couriers deliver orders; each is a Django user so the mobile app can sign in."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tracker.customers.models import UserProfile


class Courier(UserProfile):
    """The courier role of a Django user: carries orders and posts their GPS points."""

    class Vehicle(models.TextChoices):
        BICYCLE = "bicycle"
        SCOOTER = "scooter"
        CAR = "car"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="courier"
    )
    vehicle = models.CharField(max_length=16, choices=Vehicle.choices, default=Vehicle.SCOOTER)
    is_active = models.BooleanField(default=True)
