from django.contrib import admin

from tracker.customers import services
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

    def save_formset(self, request, form, formset, change) -> None:
        """Addresses edited inline keep one default, as everywhere else."""
        if formset.model is not Address:
            super().save_formset(request, form, formset, change)
            return
        for address in formset.save(commit=False):
            services.change_address(address)
        for address in formset.deleted_objects:
            services.delete_address(address)


@admin.register(Address)
class AddressAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "label", "line1", "city", "lat", "lon", "is_default"]
    search_fields = ["line1", "city", "customer__user__username"]
    list_filter = ["city", "is_default", "label"]
    list_select_related = ["customer__user"]
    raw_id_fields = ["customer"]

    def save_model(self, request, obj, form, change) -> None:
        services.change_address(obj)

    def delete_model(self, request, obj) -> None:
        services.delete_address(obj)

    def delete_queryset(self, request, queryset) -> None:
        for address in queryset:
            services.delete_address(address)
