"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tracker.settings")

django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from tracker.asgi_limits import BodySizeLimit  # noqa: E402
from tracker.live.auth import websocket_stack  # noqa: E402
from tracker.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodySizeLimit(django_asgi_app),
        "websocket": websocket_stack(URLRouter(websocket_urlpatterns)),
    }
)
