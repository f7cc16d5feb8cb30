"""API token authentication with expiry (``API_TOKEN_TTL_DAYS``, see tracker/accounts/security.py)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from tracker.accounts import services
from tracker.accounts.security import token_expired, token_of
from tracker.cache import outage


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, refusing expired tokens (``API_TOKEN_TTL_DAYS``) with
    one query per request; while the database cannot be reached, the sign-in kept from
    the key's last check (:mod:`tracker.cache.outage`), else the 503.
    """

    def authenticate_credentials(self, key: str) -> tuple:
        since = outage.generation()
        try:
            token = token_of(key)
        except outage.DATABASE_UNREACHABLE:
            user = outage.signed_in(key)
            if user is None:
                raise
            return user, None
        if token is None:
            raise AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise AuthenticationFailed(_("User inactive or deleted."))
        if token_expired(token):
            # Its open WebSockets are closed too (tracker/live/signals.py).
            services.sign_out(token)
            raise AuthenticationFailed("Token expired; sign in again.")
        outage.keep_sign_in(key, token.user, since)
        return token.user, token
