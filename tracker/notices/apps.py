from django.apps import AppConfig


class NoticesConfig(AppConfig):
    name = "tracker.notices"
    verbose_name = "Process notices"
