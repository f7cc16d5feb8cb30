"""API token authentication with expiry (``API_TOKEN_TTL_DAYS``, see tracker/security.py)."""

from __future__ import annotations

from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from tracker.security import token_expired


class ExpiringTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key: str):
        user, token = super().authenticate_credentials(key)
        if token_expired(token):
            token.delete()  # its open WebSockets are closed too (tracker/live/signals.py)
            raise AuthenticationFailed("Token expired; sign in again.")
        return user, token
