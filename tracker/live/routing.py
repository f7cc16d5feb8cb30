from django.urls import path, re_path

from tracker.live.operations_socket import OperationsSocket
from tracker.live.order_sockets import (
    CourierSocket,
    CustomerOrdersSocket,
    OrderSocket,
    RestaurantOrdersSocket,
)
from tracker.live.share_socket import ShareSocket

websocket_urlpatterns = [
    path("ws/orders/", CustomerOrdersSocket.as_asgi()),
    path("ws/orders/<int:order_id>/", OrderSocket.as_asgi()),
    path("ws/restaurants/<int:restaurant_id>/", RestaurantOrdersSocket.as_asgi()),
    path("ws/operations/", OperationsSocket.as_asgi()),
    path("ws/courier/", CourierSocket.as_asgi()),
    # Everything under ws/share/ is the share socket's: a malformed token is answered like
    # an unknown one (4404), never as a routing error whose message would hold the path.
    re_path(r"^ws/share/(?P<token>.*)$", ShareSocket.as_asgi()),
]
