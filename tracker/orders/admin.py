"""Operators' admin for orders. Actions go through the same domain functions as the API,
acting as the signed-in user (the policy decides, as for every channel). Nothing here
deletes an order, its items or its history (:class:`tracker.outbox.admin.NoDeletes`):
orders end by cancelling."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied

from tracker.orders import policy, services
from tracker.orders.models import Order, OrderItem, OrderStatusChange
from tracker.outbox.admin import NoDeletes


class OrderItemInline(NoDeletes, admin.TabularInline):
    model = OrderItem
    extra = 0
    fields = ["product", "quantity", "unit_price"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class OrderStatusChangeInline(NoDeletes, admin.TabularInline):
    model = OrderStatusChange
    extra = 0
    fields = ["changed_at", "previous_status", "status", "actor", "event_id"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


def _apply(modeladmin, request, queryset, command, verb: str) -> None:
    done, refused = 0, []
    for order in queryset:
        try:
            command(order.pk, by=request.user, via="admin")
            done += 1
        except (services.OrderError, PermissionDenied, policy.NotVisible) as exc:
            refused.append(str(exc))
    if done:
        modeladmin.message_user(request, f"{verb} {done} order(s).", messages.SUCCESS)
    for reason in refused:
        modeladmin.message_user(request, reason, messages.ERROR)


@admin.action(description="Advance selected orders to their next status")
def advance(modeladmin, request, queryset):
    _apply(modeladmin, request, queryset, services.advance_order, "Advanced")


@admin.action(description="Cancel selected orders")
def cancel(modeladmin, request, queryset):
    _apply(modeladmin, request, queryset, services.cancel_order, "Cancelled")


@admin.register(Order)
class OrderAdmin(NoDeletes, admin.ModelAdmin):
    list_display = [
        "id",
        "customer",
        "restaurant",
        "status",
        "total",
        "courier",
        "created_at",
        "status_changed_at",
    ]
    list_filter = ["status", "restaurant", "created_at"]
    search_fields = ["id", "customer__user__username", "restaurant__name", "delivery_address"]
    list_select_related = ["customer__user", "restaurant", "courier__user"]
    date_hierarchy = "created_at"
    inlines = [OrderItemInline, OrderStatusChangeInline]
    actions = [advance, cancel]
    # Nothing an event describes can be edited here. The status changes only through the
    # actions (the lifecycle and the outbox). Who owns, cooks and carries an order, and
    # where it goes, are in the `orders` event the read model (Pinot), the WebSocket
    # groups and every list are built from: an edit here would write no event, so the old
    # customer would keep listing the order and receiving its pushes while the database
    # said otherwise. Couriers change only through the order services, whose status
    # event carries the new courier.
    readonly_fields = [
        "customer",
        "restaurant",
        "courier",
        "delivery_address",
        "delivery_lat",
        "delivery_lon",
        "status",
        "total",
        "created_at",
        "updated_at",
        "status_changed_at",
        "idempotency_key",
    ]

    def has_add_permission(self, request) -> bool:
        return False  # orders are placed through the API, which writes the outbox


@admin.register(OrderStatusChange)
class OrderStatusChangeAdmin(NoDeletes, admin.ModelAdmin):
    list_display = ["id", "order", "previous_status", "status", "changed_at", "actor"]
    list_filter = ["status", "changed_at"]
    search_fields = ["order__id", "event_id", "actor"]
    readonly_fields = ["order", "status", "previous_status", "changed_at", "event_id", "actor"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(OrderItem)
class OrderItemAdmin(NoDeletes, admin.ModelAdmin):
    list_display = ["id", "order", "product", "quantity", "unit_price"]
    search_fields = ["order__id", "product__name"]
    list_filter = ["product__category"]
    list_select_related = ["product"]
    readonly_fields = ["order", "product", "quantity", "unit_price"]

    def has_add_permission(self, request) -> bool:
        return False
