from django.apps import AppConfig


class CouriersConfig(AppConfig):
    name = "tracker.couriers"
    verbose_name = "Couriers"
