from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "tracker.live"
    verbose_name = "Live push"
