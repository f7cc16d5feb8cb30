from django.apps import AppConfig


class SharingConfig(AppConfig):
    name = "tracker.sharing"
    verbose_name = "Shared tracking links"
