"""Pinot serving layer: table definitions and the local (embedded-mode) Pinot server."""
