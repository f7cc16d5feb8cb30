from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "tracker.orders"
    verbose_name = "Orders"
