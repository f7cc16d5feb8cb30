from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "tracker.outbox"
    verbose_name = "Event outbox"
