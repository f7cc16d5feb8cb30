"""The Django project: settings, URLs, the ASGI/WSGI entry points and their middleware.

Nothing else lives here: the domain is in the apps under ``tracker/``, the REST API in
``api/``, the pages in ``frontend/``, the event contract in ``contract/``.
"""
