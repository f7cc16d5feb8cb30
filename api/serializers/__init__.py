"""Request, query-parameter and response serializers of the API, by area.

Every response an operation sends is rendered by one of these, so the OpenAPI
schema (``/api/schema/``) describes each body a client receives. Orders are
shaped once, in :mod:`tracker.tracking.shapes`, and rendered by
:mod:`tracker.tracking.serializers` for REST and the WebSocket alike.
"""
