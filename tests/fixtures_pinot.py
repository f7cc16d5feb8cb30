"""Pinot stand-in fixtures (session-scoped local Pinot server)."""
