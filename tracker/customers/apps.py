from django.apps import AppConfig


class CustomersConfig(AppConfig):
    name = "tracker.customers"
    verbose_name = "Customers"
