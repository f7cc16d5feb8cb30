from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracker.tracking"
    verbose_name = "Tracking reads"
