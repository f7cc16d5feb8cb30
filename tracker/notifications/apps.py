from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Web Push subscriptions, customers' notification preferences and the delivery log.

    Installed so a password change or a deactivation deletes the user's subscriptions
    (:func:`tracker.notifications.services.forget_on_credential_change`)."""

    name = "tracker.notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_save

        from tracker.notifications.services import forget_on_credential_change

        post_save.connect(
            forget_on_credential_change,
            sender=get_user_model(),
            dispatch_uid="notifications-forget-subscriptions",
        )
