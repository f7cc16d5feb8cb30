from django.contrib import admin

from tracker.customers.models import Address, Customer


class AddressInline(admin.TabularInline):
    model = Address
    extra = 0


@admin.register(Customer)
class CustomerAdmin(admin.ModelAdmin):
    list_display = ["id", "display_name", "user", "phone", "created_at"]
    search_fields = [
        "user__username",
        "user__first_name",
        "user__last_name",
        "user__email",
        "phone",
    ]
    list_filter = ["created_at"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]
    inlines = [AddressInline]


@admin.register(Address)
class AddressAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "label", "line1", "city", "lat", "lon", "is_default"]
    search_fields = ["line1", "city", "customer__user__username"]
    list_filter = ["city", "is_default", "label"]
    list_select_related = ["customer__user"]
    raw_id_fields = ["customer"]
