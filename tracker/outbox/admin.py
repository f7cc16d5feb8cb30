from django.contrib import admin

from tracker.outbox.models import OutboxEvent


class NoDeletes:
    """For the admins (and inlines) of rows whose changes reach Kafka, Pinot and every
    process only through the outbox (orders, their items and history, the outbox itself):
    a delete here would bypass it (Pinot keeps the order, an unpublished change is lost,
    a process's kept copy still serves a deleted order), so there is none. Orders end by
    cancelling, through the services."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(OutboxEvent)
class OutboxEventAdmin(NoDeletes, admin.ModelAdmin):
    list_display = ["id", "topic", "key", "event_id", "event_time", "published_at", "attempts"]
    list_filter = ["topic", ("published_at", admin.EmptyFieldListFilter)]
    search_fields = ["event_id", "key"]
    readonly_fields = [f.name for f in OutboxEvent._meta.fields] + ["payload_text"]
    exclude = ["payload"]
    date_hierarchy = "event_time"

    @admin.display(description="payload")
    def payload_text(self, obj: OutboxEvent) -> str:
        return bytes(obj.payload).decode(errors="replace")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
