from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracker.tracking"
    verbose_name = "Tracking reads"

    def ready(self) -> None:
        from tracker.tracking import invalidation

        invalidation.connect()
