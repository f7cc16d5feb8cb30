from django.apps import AppConfig


class CacheConfig(AppConfig):
    name = "tracker.cache"
    verbose_name = "Read-side cache"

    def ready(self) -> None:
        """Subscribe the cache to the admin's saves and to the notices that announce them
        (and the answers kept for an outage to the access notices)."""
        from tracker.cache import invalidation, outage

        invalidation.connect()
        outage.connect()
