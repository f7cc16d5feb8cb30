from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "tracker.live"
    verbose_name = "Live push"

    def ready(self) -> None:
        from tracker.live import signals

        signals.connect()
