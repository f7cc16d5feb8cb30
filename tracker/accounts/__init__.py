"""Sign-in: API tokens with expiry, login throttles and the client address they key on.

Used by every sign-in path: the REST API, the browser pages, the admin and the
WebSocket handshake. Not an installed app: it has no models of its own.
"""
