from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """No models: DRF's ``Token`` is the token. Installed so every new token gets a key
    sealed to its user's password (:func:`tracker.accounts.security.seal_new_token`)."""

    name = "tracker.accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from django.db.models.signals import pre_save
        from rest_framework.authtoken.models import Token

        from tracker.accounts.security import seal_new_token

        pre_save.connect(seal_new_token, sender=Token, dispatch_uid="accounts-seal-token")
