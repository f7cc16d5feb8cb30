from django.urls import path

from tracker.live.consumers import CustomerOrdersSocket, OrderSocket

websocket_urlpatterns = [
    path("ws/orders/", CustomerOrdersSocket.as_asgi()),
    path("ws/orders/<int:order_id>/", OrderSocket.as_asgi()),
]
