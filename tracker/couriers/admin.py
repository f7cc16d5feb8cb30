from django.contrib import admin

from tracker.couriers.models import Courier


@admin.register(Courier)
class CourierAdmin(admin.ModelAdmin):
    list_display = ["id", "display_name", "user", "vehicle", "phone", "is_active"]
    search_fields = ["user__username", "user__first_name", "user__last_name", "phone"]
    list_filter = ["vehicle", "is_active"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]
