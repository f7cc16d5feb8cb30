from django.contrib import admin

from tracker.restaurants.models import Product, Restaurant


class ProductInline(admin.TabularInline):
    model = Product
    extra = 0
    fields = ["name", "category", "price", "is_available"]


@admin.register(Restaurant)
class RestaurantAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "address", "lat", "lon", "is_open"]
    search_fields = ["name", "address"]
    list_filter = ["is_open"]
    filter_horizontal = ["staff"]
    inlines = [ProductInline]


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "restaurant", "category", "price", "is_available"]
    search_fields = ["name", "category", "restaurant__name"]
    list_filter = ["category", "is_available", "restaurant"]
    list_select_related = ["restaurant"]
    list_editable = ["price", "is_available"]
