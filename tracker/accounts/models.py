"""API tokens: one per sign-in, stored only as the SHA-256 of their key.

The key (:func:`tracker.accounts.security.sealed_key`) is shown once, in the sign-in's
answer; a copy of this table (a backup, a replica, the admin) opens no account. A key is
found by its digest's index, so nothing secret is compared in Python but the seal that
binds it to the password (:func:`tracker.accounts.security.key_fits`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """One signed-in client (an app on a device): revoked alone by its sign-out, with the
    user's others by a sign-out everywhere or a password change."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    #: SHA-256 of the key, hexadecimal; the key itself is never stored.
    digest = models.CharField(max_length=64, unique=True, editable=False)
    #: What the client said it is when it signed in (``client`` of the sign-in), for the
    #: user and the operators to tell their sign-ins apart.
    client = models.CharField(max_length=100, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"API token #{self.pk} of {self.user_id}"
