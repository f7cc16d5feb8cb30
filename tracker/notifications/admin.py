"""Operators' view of subscriptions, preferences and the delivery log: read-only (the
customers make subscriptions and preferences; the notifier writes the log). A
subscription may be deleted (a browser that misbehaves); nothing else is changed here."""

from django.contrib import admin

from tracker.notifications.models import Delivery, NotificationPreferences, PushSubscription


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(PushSubscription)
class PushSubscriptionAdmin(ReadOnly):
    list_display = ["id", "user", "label", "created_at", "last_success_at", "last_failure_at"]
    search_fields = ["user__username"]
    list_select_related = ["user"]
    # The keys and the seal stay off the page: nobody needs them to see who is subscribed.
    fields = ["user", "endpoint", "label", "created_at", "last_success_at", "last_failure_at",
              "last_failure"]  # fmt: skip
    readonly_fields = fields


@admin.register(NotificationPreferences)
class NotificationPreferencesAdmin(ReadOnly):
    list_display = ["customer", "push_enabled", "email_enabled", "moments", "updated_at"]
    list_select_related = ["customer__user"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly):
    list_display = ["order_id", "moment", "occurrence", "channel", "state", "attempts",
                    "decided_from", "updated_at", "detail"]  # fmt: skip
    list_filter = ["channel", "state", "moment"]
    search_fields = ["order_id"]
    date_hierarchy = "created_at"

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # the log is what makes a moment shown once
