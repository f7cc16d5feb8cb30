"""Orders, their items and their status history: the system of record.

The status lifecycle itself is defined once, in :mod:`contract.events`, and
enforced by :mod:`tracker.orders.services`; nothing here changes a status.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

from contract.events import TERMINAL_STATUSES, OrderStatus, status_label
from tracker.couriers.models import Courier
from tracker.customers.models import DELIVERY_ADDRESS_MAX, LATITUDE, LONGITUDE, Customer
from tracker.restaurants.models import Product, Restaurant

STATUS_CHOICES = [(s.value, status_label(s)) for s in OrderStatus]


class OrderQuerySet(models.QuerySet):
    """Order queries by lifecycle: ``active()`` is every order not yet delivered or cancelled."""

    def active(self) -> OrderQuerySet:
        return self.exclude(status__in=[s.value for s in TERMINAL_STATUSES])


class Order(models.Model):
    """One customer's order from one restaurant: the system of record for its status.

    Every change goes through :mod:`tracker.orders.services`, which writes the row and its
    outbox event in one transaction; Pinot and the WebSockets learn of it only from that event.
    ``status`` is the current step; :class:`OrderStatusChange` keeps every transition.
    """

    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="orders")
    restaurant = models.ForeignKey(Restaurant, on_delete=models.PROTECT, related_name="orders")
    courier = models.ForeignKey(
        Courier, on_delete=models.PROTECT, null=True, blank=True, related_name="orders"
    )
    status = models.CharField(
        max_length=32, choices=STATUS_CHOICES, default=OrderStatus.PLACED_ORDER.value
    )
    total = models.DecimalField(max_digits=12, decimal_places=2)
    delivery_address = models.CharField(max_length=DELIVERY_ADDRESS_MAX)
    delivery_lat = models.FloatField(validators=LATITUDE)
    delivery_lon = models.FloatField(validators=LONGITUDE)
    #: Client-chosen key that makes a retried "place order" return the same order.
    # NULL, not "", when absent: the unique constraint must ignore orders without a key.
    idempotency_key = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(db_index=True)
    updated_at = models.DateTimeField()
    status_changed_at = models.DateTimeField()

    objects = OrderQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["customer", "-created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["customer", "idempotency_key"], name="unique_idempotency_key_per_customer"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=[s.value for s in OrderStatus]),
                name="order_status_is_known",
            ),
        ]

    def __str__(self) -> str:
        return f"Order #{self.pk}"


class OrderItem(models.Model):
    """One line of an order, with the unit price at the time of ordering (menus change,
    orders do not).
    """

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="+")
    quantity = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    #: Price at the time of ordering; menus change, orders do not.
    unit_price = models.DecimalField(max_digits=10, decimal_places=2)

    class Meta:
        ordering = ["order_id", "id"]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.product.name}"

    @property
    def line_total(self) -> Decimal:
        return self.unit_price * self.quantity


class OrderStatusChange(models.Model):
    """One row per transition: the audit trail in the system of record."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="status_changes")
    status = models.CharField(max_length=32, choices=STATUS_CHOICES)
    previous_status = models.CharField(max_length=32, choices=STATUS_CHOICES, blank=True)
    changed_at = models.DateTimeField()
    event_id = models.UUIDField(unique=True)
    actor = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["order_id", "changed_at", "id"]

    def __str__(self) -> str:
        return f"{self.order_id}: {self.previous_status or '-'} -> {self.status}"
