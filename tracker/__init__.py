"""Ordertrack: the Django project (settings, urls, asgi) and its domain apps."""
