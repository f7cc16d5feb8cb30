from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """API tokens (stored as digests, :mod:`tracker.accounts.models`), their seal to the
    password, socket tickets and the sign-in budgets."""

    name = "tracker.accounts"
    verbose_name = "Accounts"
